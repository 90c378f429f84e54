"""A capture whose rank processes cannot all fit in this machine's memory is refused before anything starts: no
directory, no namespace, no rank. Before, `ddlsim capture ddp --workers 5000` (or `ddlsim.apply_plan`, `validate`)
started rank after rank, each importing PyTorch (0.7-1.0 GiB resident here), until the machine ran out of memory."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from ddlsim.capture.launch import RANK_MEMORY_FLOOR_BYTES, available_memory_bytes, check_world_fits, launch_local
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError

available = available_memory_bytes()
pytestmark = pytest.mark.skipif(available is None, reason="no /proc/meminfo: the machine's memory is not known")
# twice what fits now: the free memory moves a little between the reads, never by that much
TOO_MANY = 2 * (available // RANK_MEMORY_FLOOR_BYTES) + 2 if available else 0


def test_the_world_that_does_not_fit_is_named_with_how_many_do():
    with pytest.raises(DdlsimError) as caught:
        check_world_fits(TOO_MANY)
    text = str(caught.value)
    assert f"--workers: {TOO_MANY} rank processes" in text
    # how many fit: what was available when it was asked (the machine's free memory moves between two reads)
    fit = int(re.search(r"give at most (\d+) ranks here", text).group(1))
    assert 1 <= fit < TOO_MANY and "\n" not in text
    check_world_fits(1)  # one rank fits


@pytest.mark.parametrize("argv", [
    ["capture", "ddp", "--workers", str(TOO_MANY)],
    ["capture", "ps", "--workers", str(TOO_MANY), "--connections", "none"],
])
def test_the_capture_commands_refuse_it_and_write_nothing(tmp_path, argv):
    pytest.importorskip("torch", reason="the capture commands need PyTorch first")
    out = tmp_path / "cap"
    result = CliRunner().invoke(app, [*argv, "--out", str(out)])
    assert result.exit_code != 0 and isinstance(result.exception, DdlsimError), result.output
    assert "rank processes on this machine need at least" in str(result.exception)
    assert not out.exists()


def test_launch_local_refuses_it_before_its_directory(tmp_path):
    with pytest.raises(DdlsimError, match="rank processes on this machine"):
        launch_local("ddp", {}, TOO_MANY, tmp_path / "cap")
    assert not (tmp_path / "cap").exists()
