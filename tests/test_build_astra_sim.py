"""tools/build_astra_sim.sh's bad input: one line on stderr, exit 2, and nothing left in the work directory.
No build runs here: each case fails before cmake (a missing mirror, a commit the repository does not have)."""

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "build_astra_sim.sh"


def _run(*args, cwd):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _one_line_exit_2(run, *words):
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("build_astra_sim.sh: "), run.stderr
    assert all(w in lines[0] for w in words), run.stderr


def test_a_missing_mirror_is_one_line_and_creates_nothing(tmp_path):
    work = tmp_path / "work"
    run = _run("--mirror-root", str(tmp_path / "no-mirrors"), "--work", str(work), cwd=tmp_path)
    _one_line_exit_2(run, "no mirror of", "astra-sim+astra-sim")
    assert not work.exists()


def test_a_commit_the_mirror_lacks_is_one_line_and_leaves_no_partial_checkout(tmp_path):
    """A mirror with one commit; --commit names another: the clone succeeds, the checkout fails. The run used to
    exit 128 with git's message and leave the clone, so the next run refused with '... exists but is not a
    finished checkout'."""
    src = tmp_path / "upstream"
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    (src / "README").write_text("x\n")
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    mirror = tmp_path / "mirrors" / "astra-sim+astra-sim" / "repo"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(mirror)], check=True)
    work = tmp_path / "work"
    missing = "0123456789abcdef0123456789abcdef01234567"
    for _ in range(2):  # the second run meets the same error, not a leftover directory
        run = _run("--mirror-root", str(tmp_path / "mirrors"), "--work", str(work), "--commit", missing, cwd=tmp_path)
        _one_line_exit_2(run, missing, "--commit")
        assert not work.exists()


def test_a_commit_that_is_not_a_sha_is_refused(tmp_path):
    run = _run("--commit", "../../elsewhere", "--work", str(tmp_path / "work"), cwd=tmp_path)
    _one_line_exit_2(run, "--commit must be a commit SHA")
    assert not (tmp_path / "work").exists()
