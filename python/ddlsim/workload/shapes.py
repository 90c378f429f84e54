"""Layer tables by shape arithmetic, without PyTorch: parameter counts and
per-sample FLOPs of Conv2d / BatchNorm2d / Linear layers, with the same
conventions as the zoo generator (tools/gen_model_zoo.py, which counts with
torch.utils.flop_counter):

- Conv2d: forward 2 * C_in/groups * C_out * k_h * k_w * H_out * W_out; backward
  twice that (input and weight gradients), except for the model's first
  layer, whose input needs no gradient (backward = forward);
- Linear: forward 2 * in * out, backward twice that;
- BatchNorm2d: no FLOPs counted (flop_counter counts matmul/conv-like ops only).

Used for ResNet-200 (`tools/gen_resnet200.py`) and for the Inception-v3
modules of synthetic growth (`ddlsim.workload.growth`). The functions are
checked against the torch-generated zoo files (ResNet-50/101/152 and the
Inception-v3 Mixed_5d / Mixed_6e blocks) in tests/test_whatifs.py.
"""

from __future__ import annotations


def conv(name: str, c_in: int, c_out: int, kernel: tuple[int, int], out_hw: tuple[int, int], bias: bool = False,
         first: bool = False) -> dict:
    kh, kw = kernel
    weight = c_out * c_in * kh * kw
    fwd = 2 * weight * out_hw[0] * out_hw[1]
    tensors = [{"name": f"{name}.weight", "elements": weight}]
    if bias:
        tensors.append({"name": f"{name}.bias", "elements": c_out})
    return {"name": name, "type": "Conv2d", "fwd_flops": fwd, "bwd_flops": fwd if first else 2 * fwd, "tensors": tensors}


def bn(name: str, channels: int) -> dict:
    return {"name": name, "type": "BatchNorm2d", "fwd_flops": 0, "bwd_flops": 0,
            "tensors": [{"name": f"{name}.weight", "elements": channels}, {"name": f"{name}.bias", "elements": channels}]}


def linear(name: str, n_in: int, n_out: int) -> dict:
    fwd = 2 * n_in * n_out
    return {"name": name, "type": "Linear", "fwd_flops": fwd, "bwd_flops": 2 * fwd,
            "tensors": [{"name": f"{name}.weight", "elements": n_in * n_out}, {"name": f"{name}.bias", "elements": n_out}]}


def resnet_bottleneck(blocks: list[int], num_classes: int = 1000, image: int = 224) -> list[dict]:
    """torchvision ResNet(Bottleneck, blocks) layers in forward-hook order
    (conv1, bn1, per block conv1/bn1/conv2/bn2/conv3/bn3 then downsample)."""
    layers = [conv("conv1", 3, 64, (7, 7), (image // 2, image // 2), first=True), bn("bn1", 64)]
    hw = image // 4  # after the stride-2 conv and the stride-2 max pool
    inplanes = 64
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks), start=1):
        stride = 1 if stage == 1 else 2
        for b in range(count):
            p = f"layer{stage}.{b}"
            s = stride if b == 0 else 1
            out = hw // s
            layers += [conv(f"{p}.conv1", inplanes, planes, (1, 1), (hw, hw)), bn(f"{p}.bn1", planes),
                       conv(f"{p}.conv2", planes, planes, (3, 3), (out, out)), bn(f"{p}.bn2", planes),
                       conv(f"{p}.conv3", planes, planes * 4, (1, 1), (out, out)), bn(f"{p}.bn3", planes * 4)]
            if b == 0 and (s != 1 or inplanes != planes * 4):
                layers += [conv(f"{p}.downsample.0", inplanes, planes * 4, (1, 1), (out, out)),
                           bn(f"{p}.downsample.1", planes * 4)]
            inplanes = planes * 4
            hw = out
    layers.append(linear("fc", 512 * 4, num_classes))
    return layers


def _basic(name: str, c_in: int, c_out: int, kernel: tuple[int, int], hw: int) -> list[dict]:
    """Inception's BasicConv2d: conv without bias, then batch norm (same spatial size)."""
    return [conv(f"{name}.conv", c_in, c_out, kernel, (hw, hw)), bn(f"{name}.bn", c_out)]


def inception_a(prefix: str, in_channels: int = 288, pool_features: int = 64, hw: int = 35) -> list[dict]:
    """torchvision InceptionA (the 35x35 module; Mixed_5d is InceptionA(288, 64))."""
    return (_basic(f"{prefix}.branch1x1", in_channels, 64, (1, 1), hw)
            + _basic(f"{prefix}.branch5x5_1", in_channels, 48, (1, 1), hw)
            + _basic(f"{prefix}.branch5x5_2", 48, 64, (5, 5), hw)
            + _basic(f"{prefix}.branch3x3dbl_1", in_channels, 64, (1, 1), hw)
            + _basic(f"{prefix}.branch3x3dbl_2", 64, 96, (3, 3), hw)
            + _basic(f"{prefix}.branch3x3dbl_3", 96, 96, (3, 3), hw)
            + _basic(f"{prefix}.branch_pool", in_channels, pool_features, (1, 1), hw))


def inception_c(prefix: str, in_channels: int = 768, channels_7x7: int = 192, hw: int = 17) -> list[dict]:
    """torchvision InceptionC (the 17x17 module; Mixed_6e is InceptionC(768, 192))."""
    c7 = channels_7x7
    return (_basic(f"{prefix}.branch1x1", in_channels, 192, (1, 1), hw)
            + _basic(f"{prefix}.branch7x7_1", in_channels, c7, (1, 1), hw)
            + _basic(f"{prefix}.branch7x7_2", c7, c7, (1, 7), hw)
            + _basic(f"{prefix}.branch7x7_3", c7, 192, (7, 1), hw)
            + _basic(f"{prefix}.branch7x7dbl_1", in_channels, c7, (1, 1), hw)
            + _basic(f"{prefix}.branch7x7dbl_2", c7, c7, (7, 1), hw)
            + _basic(f"{prefix}.branch7x7dbl_3", c7, c7, (1, 7), hw)
            + _basic(f"{prefix}.branch7x7dbl_4", c7, c7, (7, 1), hw)
            + _basic(f"{prefix}.branch7x7dbl_5", c7, 192, (1, 7), hw)
            + _basic(f"{prefix}.branch_pool", in_channels, 192, (1, 1), hw))
