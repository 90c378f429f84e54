"""The built-in models of the DDP capture and their synthetic data.

``lenet5`` is the zoo's LeNet-5 (tools/gen_model_zoo.py: same layers, names
and shapes, 1x32x32 input); ``resnet18`` / ``resnet50`` are torchvision's
(``weights=None``, 1000 classes, so their parameters match the zoo tables).
Layer names are module names, as in the zoo.
"""

from __future__ import annotations

MODELS = ("lenet5", "resnet18", "resnet50")
CLASSES = {"lenet5": 10, "resnet18": 1000, "resnet50": 1000}


def check_model_config(model: str, image_size: int) -> None:
    """Raises ValueError with the fix for a model name or image size the job cannot run."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; the DDP capture builds {', '.join(MODELS)} "
                         "(or record your own model with ddlsim.capture.attach)")
    if model == "lenet5" and image_size != 32:
        raise ValueError(f"lenet5 takes 1x32x32 images (its fc1 expects 16x5x5 features); got image size {image_size}")
    if model != "lenet5" and image_size < 32:
        raise ValueError(f"{model} needs images of at least 32x32 (five stride-2 stages); got image size {image_size}")


def build_model(model: str):
    if model == "lenet5":
        from .lenet import LeNet5

        return LeNet5()
    import torchvision.models

    return getattr(torchvision.models, model)(weights=None)


def synthetic_batches(model: str, batch_size: int, image_size: int, count: int, seed: int):
    """`count` (images, labels) batches of random data, the same for a given seed."""
    import torch

    channels = 1 if model == "lenet5" else 3
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch_size, channels, image_size, image_size, generator=generator),
             torch.randint(0, CLASSES[model], (batch_size,), generator=generator)) for _ in range(count)]
