"""The set-up the device microbenchmarks share (benchmarks/conv_shapes.py, benchmarks/host_dispatch.py): torch on
the named device, refused in one line when it is "cuda" and torch sees no GPU; cuDNN's autotuner off (PyTorch's
default, as in benchmarks/gpu_layer_times.py) and the random generator seeded; and their one way to check and
write a result file (the capture-overhead benchmarks' --json too)."""
from __future__ import annotations

import sys
from pathlib import Path


def torch_on(device: str, note: str = ""):
    """(torch, torch.device, is CUDA) for `device` ("cuda" or "cpu"), or None after a one-line error on stderr
    when this Python cannot import torch (`note` appended to it) or `device` is "cuda" and torch sees no GPU."""
    try:
        import torch
    except ImportError:
        print(f"error: measuring needs torch, which this Python cannot import; run it with the Python that has torch"
              f"{note}", file=sys.stderr)
        return None

    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no GPU; use --device cpu --quick for a smoke test", file=sys.stderr)
        return None
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    return torch, torch.device(device), cuda


def check_out(out: Path, option: str = "--out") -> bool:
    """Whether `out` may receive the result file (ddlsim's rule: a new or regular file, never a directory, a device, a
    FIFO or an input); False after a one-line error. Checked before measuring, so a bad path costs no run."""
    from ddlsim.errors import DdlsimError
    from ddlsim.safe_io import check_file_target

    try:
        check_file_target(out, option=option)
    except DdlsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    return True


def write_out(out: Path, text: str, option: str = "--out", **kwargs) -> bool:
    """`text` as the file `out` through ddlsim's atomic write (a scratch folder beside it, renamed onto it; never
    onto a directory, a device, a FIFO or an input); False after a one-line error."""
    from ddlsim.errors import DdlsimError
    from ddlsim.safe_io import write_text_file

    try:
        write_text_file(out, text, option=option, **kwargs)
    except DdlsimError as exc:
        print(f"error: {option} {out}: {exc}", file=sys.stderr)
        return False
    return True
