"""Accelerator presets for FLOPs-based compute time.

Peak dense throughput per GPU in TFLOP/s from the vendors' datasheets
(boost clocks, one GPU of a K80 board, SXM parts where both exist). "fp32"
is plain single precision; "fp16" is half precision on tensor cores where
the part has them (dense, without sparsity).

Compute time of a layer = FLOPs per sample x batch / (peak x efficiency).
The efficiency (share of peak a real kernel reaches) defaults to 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    name: str
    fp32_tflops: float
    fp16_tflops: float

    def peak_flops(self, precision: str) -> float:
        return (self.fp32_tflops if precision == "fp32" else self.fp16_tflops) * 1e12


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("K80", fp32_tflops=4.37, fp16_tflops=4.37),  # Kepler: no fast fp16
        Device("P100", fp32_tflops=10.6, fp16_tflops=21.2),
        Device("V100", fp32_tflops=15.7, fp16_tflops=125.0),
        Device("T4", fp32_tflops=8.1, fp16_tflops=65.0),
        Device("A100", fp32_tflops=19.5, fp16_tflops=312.0),
        Device("H100", fp32_tflops=67.0, fp16_tflops=989.0),
    )
}


def find_device(name: str) -> Device:
    key = name.strip().upper()
    if key not in DEVICES:
        raise KeyError(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}")
    return DEVICES[key]
