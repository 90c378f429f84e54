"""The README's examples really run: every command of "One example per
command" and the Python API block, in a scratch directory."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import forked_cli
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(after_heading: str, language: str) -> str:
    section = README.split(after_heading, 1)[1]
    return re.search(rf"```{language}\n(.*?)```", section, flags=re.S).group(1)


def _scratch(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


# Commands of "One example per command" whose output no later example reads and that other tests read too (the
# demo: test_analyze_report; the quick reproductions: test_reproduce_*; plan --apply: test_capture_plan): run once
# per session, in a scratch directory of their own with the same `examples` link (conftest.ddlsim_once), word for
# word as the README writes them.
SHARED = ("demo", "reproduce")


def _shared_out(argv: list[str]) -> str | None:
    """The directory a shared command writes (None: the command is not shared)."""
    if argv[1] in SHARED:
        assert argv[-2] == "--out", argv
        return argv[-1].rstrip("/")
    if argv[1:3] == ["plan", "--apply"]:
        return argv[3].rstrip("/")
    return None


def test_every_command_example_runs(tmp_path, ddlsim_once):
    cwd = _scratch(tmp_path)
    commands = [line.split("#", 1)[0].strip() for line in _block("## One example per command", "sh").splitlines()]
    commands = [c for c in commands if c]
    assert len(commands) >= 7
    shared_outs = [out for out in (_shared_out(shlex.split(c)) for c in commands) if out is not None]
    assert len(shared_outs) >= 5
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "ddlsim"
        if _shared_out(argv) is not None:
            run, _ = ddlsim_once(*argv[1:])
        else:
            assert not any(arg.split("/")[0] in shared_outs for arg in argv), command  # it reads no shared output
            run = forked_cli.run(argv[1:], cwd=cwd, env={**os.environ, "COLUMNS": "100"}, timeout=300)
        assert run.returncode == 0, (command, run.stderr[-2000:])
    assert (cwd / "run1" / "events.parquet").exists() and (cwd / "plan.json").exists() and (cwd / "t.json").exists()
    assert (cwd / "report.html").exists()


def test_the_walk_through_runs_on_a_real_capture(tmp_path):
    """Capture (DDP and PS, real PyTorch jobs), analyze, replay, compare, convert: every command, then the Python block."""
    pytest.importorskip("torch")
    cwd = _scratch(tmp_path)
    section = "## Walk-through: a real run, analysed, replayed"
    commands = [line.split("#", 1)[0].strip() for line in _block(section, "sh").splitlines()]
    for command in filter(None, commands):
        argv = shlex.split(command)
        assert argv[0] == "ddlsim"
        run = forked_cli.run(argv[1:], cwd=cwd, env={**os.environ, "COLUMNS": "100"}, timeout=300)
        assert run.returncode == 0, (command, run.stderr[-2000:])
    for path in ("cap/events.parquet", "cap/report.html", "cap-replay/events.parquet", "cap-ps/analysis/report.html",
                 "cap-ps/sketchdlc/w0.txt", "sim/report.html"):
        assert (cwd / path).exists(), path
    run = forked_cli.run_code(_block(section, "python"), cwd=cwd, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_python_api_example_runs(snippet_once):
    # run once per session (test_doc_snippets runs the same block as README.md#1)
    run, cwd = snippet_once(_block("## Python API", "python"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert (cwd / "run1" / "events.parquet").exists()


def _anchor(heading: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_docs_link_in_the_readme_exists():
    links = re.findall(r"\]\((docs/[^)]+)\)", README)
    assert links
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        if not (ROOT / path).is_file():
            broken.append(link)
            continue
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), flags=re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(link)
    assert not broken, broken
