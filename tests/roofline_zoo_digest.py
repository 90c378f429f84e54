"""The roofline's per-layer forward and backward times of every zoo CNN on the H100, H200, B200 and A100 in every
precision at batch 32 and 128, hashed: what the tests that pin "no table = the model as before" compare (the tables
and presets as the calling test has monkeypatched them)."""

import hashlib
import json

from ddlsim.workload import roofline
from ddlsim.workload.zoo import load_model

CNNS = ["alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "inception_v3", "googlenet"]


def zoo_digest() -> str:
    rows = []
    for m in CNNS + ["lenet5"]:
        model = load_model(m)
        for dev in ["H100", "H200", "B200", "A100"]:
            for p in ["fp32", "tf32", "fp16", "bf16"]:
                for b in [32, 128]:
                    rows.append([m, dev, p, b, [list(t) for t in roofline.layer_times_s(model, dev, p, b)]])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
