"""The network-operator paper's numbers, transcribed from its tables and text.

Chang, Bottini, Jian, Kumar, Panda, Shenker: "How to Train your DNN: The
Network Operator Edition" (/work/shared/papers/network-operator-edition-simulator.txt).
Every constant names the table or section it comes from. Model names are
the zoo's (`inception_v3`, `vgg16`, `resnet101`, `resnet200`); the paper
writes Inception-v3, VGG-16, Resnet-101, Resnet-200. Times in seconds,
speedups as factors (the paper's "1.34x" is 1.34).
"""

from __future__ import annotations

MODELS = ("inception_v3", "vgg16", "resnet101", "resnet200")
PAPER_NAMES = {"inception_v3": "Inception-v3", "vgg16": "VGG-16", "resnet101": "Resnet-101", "resnet200": "Resnet-200"}

# Table 1: iteration time (s), 8 workers, by number of parameter servers; "sim" the paper's simulator, "real" measured.
TABLE1_SERVERS = (1, 2, 4, 8)
TABLE1 = {
    ("vgg16", "sim"): (21.0, 22.5, 19.3, 18.2),
    ("vgg16", "real"): (22.5, 22.8, 20.8, 19.3),
    ("inception_v3", "sim"): (2.29, 2.29, 1.37, 0.852),
    ("inception_v3", "real"): (2.16, 2.16, 1.49, 1.3),
    ("resnet200", "sim"): (7.15, 3.34, 2.3, 2.29),
    ("resnet200", "real"): (5.89, 2.3, 1.71, 1.71),
    ("resnet101", "sim"): (4.57, 2.37, 1.52, 1.5),
    ("resnet101", "real"): (3.7, 1.58, 0.855, 0.9),
}

# Table 2: layers, weights, model size (Gbit), FLOPs.
TABLE2 = {
    "inception_v3": {"layers": 21, "weights": 2.5e6, "model_size_gbit": 0.715, "flops": 1.1e10},
    "vgg16": {"layers": 22, "weights": 1.9e8, "model_size_gbit": 6.58, "flops": 5.4e10},
    "resnet101": {"layers": 103, "weights": 2.2e6, "model_size_gbit": 1.42, "flops": 1.3e10},
    "resnet200": {"layers": 202, "weights": 2.2e6, "model_size_gbit": 2.06, "flops": 2.8e10},
}

# Table 3: forward pass compute, backprop compute without the first backprop layer, backprop network time at
# 25 Gbit/s (s), and the compute:net ratio.
TABLE3 = {
    "inception_v3": {"fwd_s": 0.176, "bwd_s": 0.296, "net_25g_s": 0.028, "ratio": 10.6},
    "vgg16": {"fwd_s": 0.169, "bwd_s": 0.024, "net_25g_s": 0.263, "ratio": 0.09},
    "resnet101": {"fwd_s": 0.176, "bwd_s": 0.180, "net_25g_s": 0.052, "ratio": 3.46},
    "resnet200": {"fwd_s": 0.357, "bwd_s": 0.34, "net_25g_s": 0.082, "ratio": 4.14},
}

# Table 4: speedup over the baseline (plain parameter server), 32 workers, 25 Gbit/s.
TABLE4 = {
    "inception_v3": {"aggregation": 1.34, "multicast": 1.69, "multiagg": 3.28},
    "vgg16": {"aggregation": 1.89, "multicast": 1.94, "multiagg": 22.0},
    "resnet101": {"aggregation": 1.65, "multicast": 1.79, "multiagg": 6.07},
    "resnet200": {"aggregation": 1.65, "multicast": 1.85, "multiagg": 6.7},
}

# Table 5: forward / backprop benchmarks of [9] (ms), not the paper's traces; kept for the calibration discussion.
TABLE5 = {
    ("resnet200", "Maxwell Titan X"): (170, 384), ("resnet200", "Pascal Titan X"): (315, 520),
    ("vgg16", "Maxwell Titan X"): (173, 416), ("vgg16", "Pascal Titan X"): (98.2, 260),
    ("resnet101", "Maxwell Titan X"): (109, 190), ("resnet101", "Pascal Titan X"): (162, 258),
    ("inception_v1", "Maxwell Titan X"): (91.3, 141), ("inception_v1", "Pascal Titan X"): (57.5, 85.9),
}

# Table 6: speedup over the baseline, 32 workers, 25 Gbit/s.
TABLE6 = {
    "vgg16": {"ring": 24.6, "ring_multicast": 24.6, "butterfly": 11.3},
    "resnet200": {"ring": 6.75, "ring_multicast": 6.76, "butterfly": 6.79},
    "resnet101": {"ring": 6.55, "ring_multicast": 6.71, "butterfly": 6.46},
    "inception_v3": {"ring": 3.35, "ring_multicast": 3.41, "butterfly": 3.41},
}

# Table 7: share of the model's bytes on the least and most loaded server under TensorFlow's round-robin
# placement, and the ideal share (the paper's "%" columns are fractions: 0.918 = 91.8 %).
TABLE7 = {
    (4, "vgg16"): (4e-5, 0.918, 0.25),
    (8, "vgg16"): (1e-5, 0.859, 0.125),
    (4, "inception_v3"): (0.0007, 0.451, 0.25),
    (8, "inception_v3"): (0.0003, 0.292, 0.125),
    (4, "resnet200"): (0.165, 0.33, 0.25),
    (8, "resnet200"): (0.002, 0.22, 0.125),
}

# Table 8: iteration time (s): multicast + aggregation with 1 server, with 8 servers and every parameter split
# evenly over them, and ring-reduce; 32 workers, 25 Gbit/s.
TABLE8 = {
    "vgg16": {"multiagg": 0.765, "multiagg_8ps": 0.539, "ring": 0.683},
    "resnet200": {"multiagg": 0.830, "multiagg_8ps": 0.820, "ring": 0.824},
    "resnet101": {"multiagg": 0.598, "multiagg_8ps": 0.551, "ring": 0.556},
    "inception_v3": {"multiagg": 0.569, "multiagg_8ps": 0.549, "ring": 0.562},
}

# Table 9: time (s) measured over three iterations, from the first parameter's aggregation in iteration 1 to
# its arrival in iteration 3 (so about two iterations); 32 workers, 25 Gbit/s.
TABLE9 = {
    "vgg16": {"multiagg": 1.53, "ring": 1.37, "multiagg_no_barrier": 1.76},
    "resnet200": {"multiagg": 1.65, "ring": 1.65, "multiagg_no_barrier": 1.65},
    "resnet101": {"multiagg": 1.17, "ring": 1.13, "multiagg_no_barrier": 1.08},
    "inception_v3": {"multiagg": 1.14, "ring": 1.13, "multiagg_no_barrier": 0.988},
}

# Table 10: iteration time (s) with in-network aggregation vs block parameter distribution, 32 workers.
TABLE10 = {
    ("inception_v3", 10): {"aggregation": 2.99, "block": 3.1},
    ("vgg16", 10): {"aggregation": 22.3, "block": 21.7},
    ("resnet101", 10): {"aggregation": 4.9, "block": 4.94},
    ("resnet200", 10): {"aggregation": 7.77, "block": 7.79},
    ("inception_v3", 100): {"aggregation": 0.71, "block": 0.77},
    ("vgg16", 100): {"aggregation": 2.23, "block": 2.27},
    ("resnet101", 100): {"aggregation": 0.89, "block": 0.94},
    ("resnet200", 100): {"aggregation": 1.19, "block": 1.45},
}

# Numbers stated in the text about the figures (which themselves carry no printed values).
TEXT_CLAIMS = {
    "fig8": "VGG16, 25 Gbit/s: ring-reduce has nearly a 2x advantage over multicast + aggregation with 4 workers "
            "and 1.3x with 32 workers (§8.3)",
    "fig3-5": "with 32 workers, across all bandwidths, ring-reduce outperforms multicast + aggregation; the gap is "
              "largest for VGG16 and at low bandwidth (§8.3)",
    "fig6": "ring-reduce with multicast performs equivalently to ring-reduce (§8.4)",
    "fig9": "network-intensive growth: neither aggregation nor multicast alone reaches 2x even with 125 modules (§8.5)",
    "fig10": "compute-intensive growth: aggregation's gain drops to nothing; multicast alone equals the other "
             "mechanisms with 25 modules added (§8.5)",
    "fig11-12": "at about 2.5x faster convolutions multicast + aggregation overtakes ring-reduce and butterfly; "
                "ResNet-200 at 3x: butterfly 10x, multicast + aggregation 19.5x over the baseline (§8.6)",
    "ring_vgg16_10g_no_messaging_s": 34.0,  # §8.2.1: ring-reduce without message partitioning, 32 workers, 10 Gbit/s
    "ranking": ("ring", "multiagg", "butterfly", "multicast", "aggregation"),  # §8.7, most to least impactful
}
