"""benchmarks/bench_plan_paths.py keeps its captures only under --out: without it, its temporary directory goes,
also when a capture fails."""

import importlib.util
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_plan_paths.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_plan_paths", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_out_the_temporary_captures_are_removed(tmp_path, monkeypatch):
    import ddlsim.capture.ddp_run as ddp_run

    made = []

    def failing_capture(config, workers, out_dir, **_):
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "rank0.jsonl").write_text("{}\n")
        made.append(Path(out_dir))
        return None, "rank 1 exited with status 3"

    monkeypatch.setattr(ddp_run, "run_ddp_capture", failing_capture)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(SystemExit, match="before: rank 1 exited"):
        _bench().main(["--model", "lenet5", "--iterations", "2"])
    assert made and not made[0].exists() and list(tmp_path.iterdir()) == []
    # with --out the captures stay where the user asked
    out = tmp_path / "kept"
    with pytest.raises(SystemExit):
        _bench().main(["--model", "lenet5", "--iterations", "2", "--out", str(out)])
    assert (out / "before" / "rank0.jsonl").is_file()
