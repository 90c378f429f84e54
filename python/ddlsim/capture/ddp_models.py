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


class SyntheticBatches:
    """`count` (images, labels) batches of random data, the same for a given seed, made one at a time as they are
    iterated (a capture of many iterations holds one batch, not all of them: 100,000 ResNet batches were 3.3 GB per
    rank made before the first iteration). Each iteration over it starts the seeded generator again, so every pass
    gives the same batches; ``batches[k]`` makes the first k + 1 of them."""

    def __init__(self, model: str, batch_size: int, image_size: int, count: int, seed: int):
        self.shape = (batch_size, 1 if model == "lenet5" else 3, image_size, image_size)
        self.classes, self.count, self.seed = CLASSES[model], count, seed

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        import torch

        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(self.count):
            yield (torch.randn(*self.shape, generator=generator),
                   torch.randint(0, self.classes, (self.shape[0],), generator=generator))

    def __getitem__(self, index: int):
        if not -self.count <= index < self.count:
            raise IndexError(f"batch {index} of {self.count}")
        for k, batch in enumerate(self):
            if k == index % self.count:
                return batch


def synthetic_batches(model: str, batch_size: int, image_size: int, count: int, seed: int) -> SyntheticBatches:
    """`count` (images, labels) batches of random data, the same for a given seed (:class:`SyntheticBatches`)."""
    return SyntheticBatches(model, batch_size, image_size, count, seed)
