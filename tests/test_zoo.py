import pytest

from ddlsim import ModelError, list_models, load_model, synthetic_model


def test_zoo_has_the_eleven_models():
    assert list_models() == [
        "alexnet", "bert_base", "googlenet", "inception_v3", "lenet5",
        "resnet101", "resnet152", "resnet18", "resnet200", "resnet50", "vgg16",
    ]


@pytest.mark.parametrize(
    "name, tensors, params",
    [
        ("resnet18", 62, 11_689_512),
        ("resnet50", 161, 25_557_032),
        ("resnet200", 611, 64_673_832),
        ("vgg16", 32, 138_357_544),
        ("googlenet", 187, 13_004_888),
        ("inception_v3", 292, 27_161_264),
        ("lenet5", 10, 61_706),
        ("bert_base", 199, 109_482_240),
    ],
)
def test_known_parameter_counts(name, tensors, params):
    m = load_model(name)
    assert len(m.tensors) == tensors
    assert m.parameters == params


def test_resnet50_pushes_102_2_MB_of_fp32_gradients():
    # SketchDLC Table 5 reports 102.21 MB pushed per iteration.
    assert load_model("ResNet-50").size_bytes == 102_228_128


def test_backward_costs_twice_forward_except_the_input_layer():
    m = load_model("resnet50")
    first, *rest = m.layers
    assert first.bwd_flops == first.fwd_flops
    assert all(layer.bwd_flops == 2 * layer.fwd_flops for layer in rest)
    assert m.fwd_flops == 8_178_368_512


def test_unknown_model_suggests_a_close_name():
    with pytest.raises(ModelError, match="Did you mean resnet50"):
        load_model("resnet5")


def test_synthetic_model_follows_thesis_defaults():
    m = synthetic_model()
    assert len(m.layers) == 100
    assert m.size_bytes == 100_000_000
    fwd = [layer.fwd_s for layer in m.layers]
    bwd = [layer.bwd_s for layer in m.layers]
    assert sum(fwd) + sum(bwd) == pytest.approx(0.9, rel=1e-12)
    assert sum(bwd) == pytest.approx(2 * sum(fwd), rel=1e-12)
    # arithmetic progression, falling with the layer index, first = 2 x last
    steps = {round(b - a, 15) for a, b in zip(fwd, fwd[1:])}
    assert len(steps) == 1 and steps.pop() < 0
    assert fwd[0] == pytest.approx(2 * fwd[-1])
    # thesis profile: the last sixth of the layers hold most of the bytes
    sizes = [layer.tensors[0].bytes for layer in m.layers]
    assert sum(sizes[-17:]) > 0.5 * sum(sizes)


def test_synthetic_size_profile_from_a_zoo_model():
    m = synthetic_model(layers=10, model_size_bytes=4_000_000, size_distribution="vgg16")
    sizes = [layer.tensors[0].bytes for layer in m.layers]
    assert sum(sizes) == 4_000_000
    assert sizes[-2] == max(sizes)  # VGG's first fully connected layer dominates


def test_synthetic_rejects_unknown_distribution():
    with pytest.raises(ModelError, match="uniform"):
        synthetic_model(size_distribution="zipf")
