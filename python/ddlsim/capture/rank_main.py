"""One rank of a capture job: ``python -m ddlsim.capture.rank_main JOB --config FILE --out DIR``.

Reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the
environment (as torchrun sets them) and calls the job's ``run_rank(config,
rank, world_size, out_dir)`` (see :data:`ddlsim.capture.launch.JOBS`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import import_module
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from .launch import JOBS

    parser = argparse.ArgumentParser(prog="python -m ddlsim.capture.rank_main")
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("--config", required=True, help="job configuration (JSON), as `ddlsim capture` writes it")
    parser.add_argument("--out", required=True, help="capture directory shared by all ranks")
    args = parser.parse_args(argv)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        print(f"error: {', '.join(missing)} not set; start ranks with `ddlsim capture` or torchrun", file=sys.stderr)
        return 2
    config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    module, _, function = JOBS[args.job].partition(":")
    run_rank = getattr(import_module(module), function)
    run_rank(config, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
