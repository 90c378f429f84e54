"""What ddlsim writes (docs/cli.md, "What ddlsim writes"), run as a user would (subprocess):

* a file output never replaces a directory, a device, a FIFO or a socket, and never the command's own input
  (the same path, a hard link, a symbolic link, a side table);
* a directory output keeps the user's other files;
* a full device (stdout to /dev/full, a full filesystem, a file size limit), a read-only directory or cache,
  and `--report` naming a directory each give one line on stderr, exit status 2 and no partial file;
* user text with matplotlib mathtext (`$\\frac{x$`) in a model, layer or file name does not break a figure.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest

import ddlsim

ROOT = Path(__file__).resolve().parents[1]
MATHTEXT = "$\\frac{x$"


def ddlsim_cli(*args, cwd=None, stdout=subprocess.PIPE, preexec_fn=None, timeout=300):
    if stdout is subprocess.PIPE and preexec_fn is None:  # a run that needs no fresh interpreter: forked
        return forked_cli.run(list(args), cwd=cwd, timeout=timeout)
    return subprocess.run([sys.executable, "-m", "ddlsim", *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=cwd, preexec_fn=preexec_fn, timeout=timeout)


def one_line_error(p, *needles):
    """Exit status 2, one line on stderr, no traceback, naming what is at fault."""
    err = p.stderr.strip()
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert str(needle) in err, (needle, err)
    return err


def no_scratch(directory: Path):
    """No temporary files or staging directories are left behind."""
    left = [p.name for p in directory.iterdir() if p.name.startswith(".")]
    assert not left, left


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small parameter-server run (SketchDLC needs push/pull rows): run/events.parquet and its side tables."""
    out = tmp_path_factory.mktemp("log") / "run"
    ddlsim.simulate(model="lenet5", workers=2, strategy="ps", servers=1, iterations=1).save(out, timeline=False)
    return out


@pytest.fixture
def events(run, tmp_path):
    """A private copy of the run, so that a test that fails cannot spoil the others."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy / "events.parquet"


def _special_nodes(directory: Path) -> dict[str, Path]:
    """Paths that exist and are not regular files: a FIFO and a socket always, a character device (the
    /dev/full device numbers, made here) when running as root."""
    nodes = {"fifo": directory / "fifo"}
    os.mkfifo(nodes["fifo"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(directory / "sock"))
    sock.close()
    nodes["socket"] = directory / "sock"
    if os.geteuid() == 0:
        nodes["device"] = directory / "full"
        os.mknod(nodes["device"], stat.S_IFCHR | 0o666, os.makedev(1, 7))
    return nodes


def _kind(path: Path) -> str:
    mode = os.lstat(path).st_mode
    return {stat.S_ISFIFO(mode): "fifo", stat.S_ISSOCK(mode): "socket", stat.S_ISCHR(mode): "device",
            stat.S_ISREG(mode): "file", stat.S_ISDIR(mode): "directory"}[True]


# ----------------------------------------------------------------- an existing directory named as a file output

FILE_OUTPUTS = {
    "export csv": lambda ev, out: ["export", ev, "--format", "csv", "--out", out],
    "export chrome": lambda ev, out: ["export", ev, "--format", "chrome", "--out", out],
    "convert --to chrome": lambda ev, out: ["convert", ev, out, "--to", "chrome"],
    "convert --to csv": lambda ev, out: ["convert", ev, out, "--to", "csv"],
    "convert --to events": lambda ev, out: ["convert", ev, out, "--to", "events"],
    "analyze --report": lambda ev, out: ["analyze", ev, "--report", out],
}


@pytest.mark.parametrize("command", list(FILE_OUTPUTS))
def test_a_file_output_naming_an_existing_directory_is_refused_and_the_directory_kept(events, tmp_path, command):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (mine / "sub").mkdir()
    (mine / "sub" / "deep.txt").write_text("me too")
    p = ddlsim_cli(*FILE_OUTPUTS[command](events, mine), cwd=tmp_path)
    one_line_error(p, "mine", "is a directory")
    assert sorted(str(x.relative_to(mine)) for x in mine.rglob("*")) == ["notes.txt", "sub", "sub/deep.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"
    no_scratch(tmp_path)


@pytest.mark.parametrize("fmt", ["kineto", "sketchdlc"])
def test_a_directory_output_keeps_the_users_other_files(events, tmp_path, fmt):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    p = ddlsim_cli("export", events, "--format", fmt, "--out", mine)
    assert p.returncode == 0, p.stderr
    assert (mine / "notes.txt").read_text() == "keep me" and len(list(mine.iterdir())) > 1
    no_scratch(mine)


# ----------------------------------------------------------------- devices, FIFOs, sockets

NODE_OUTPUTS = {
    **FILE_OUTPUTS,
    "fit --out": lambda ev, out: ["fit", ROOT / "examples" / "allreduce_times.csv", "--out", out],
    "plan --out": lambda ev, out: ["plan", "--model", "lenet5", "--workers", "2", "--bucket-caps", "25", "--slice-sizes", "none",
                                   "--credits", "none", "--out", out],
    "capture merge --out": lambda ev, out: ["capture", "merge", ev.parent, "--out", out],
    "simulate --out": lambda ev, out: ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--out", out],
    "analyze --out": lambda ev, out: ["analyze", ev, "--out", out],
    "demo --out": lambda ev, out: ["demo", "--out", out],
}


@pytest.mark.parametrize("command", list(NODE_OUTPUTS))
def test_a_device_fifo_or_socket_is_never_replaced(events, tmp_path, command):
    where = tmp_path / "nodes"
    where.mkdir()
    nodes = _special_nodes(where)
    for kind, node in nodes.items():
        p = ddlsim_cli(*NODE_OUTPUTS[command](events, node), cwd=tmp_path)
        one_line_error(p, node.name)
        assert _kind(node) == kind, (command, kind)
    no_scratch(where)
    no_scratch(tmp_path)


@pytest.mark.parametrize("fmt, name", [("chakra", "trace.0.et"), ("kineto", "rank0.json"), ("sketchdlc", "w0.txt")])
def test_a_multi_file_output_never_replaces_a_fifo_among_its_files_and_writes_nothing(events, tmp_path, fmt, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    target = out / "trace" if fmt == "chakra" else out
    p = ddlsim_cli("export", events, "--format", fmt, "--out", target)
    one_line_error(p, name)
    assert [x.name for x in out.iterdir()] == [name] and _kind(out / name) == "fifo"


# ----------------------------------------------------------------- the command's own input

def _same_bytes(path: Path, before: bytes) -> bool:
    return path.read_bytes() == before


@pytest.mark.parametrize("how", ["same path", "hard link", "symbolic link", "side table", "relative path"])
def test_export_never_overwrites_its_own_input(events, tmp_path, how):
    originals = {p: p.read_bytes() for p in events.parent.iterdir()}
    target = {"same path": events, "side table": events.parent / "groups.parquet",
              "relative path": Path("run") / ".." / "run" / "events.parquet"}.get(how, tmp_path / "alias.parquet")
    if how == "hard link":
        os.link(events, target)
    elif how == "symbolic link":
        os.symlink(events, target)
    p = ddlsim_cli("export", events, "--format", "csv", "--out", target, cwd=tmp_path)
    one_line_error(p, "input")
    assert all(_same_bytes(path, data) for path, data in originals.items())
    assert ddlsim.trace.read_event_log(events).table.num_rows > 0


@pytest.mark.parametrize("args", [
    lambda ev: ["convert", ev, ev],
    lambda ev: ["convert", ev, ev.parent / "groups.parquet", "--to", "chrome"],
    lambda ev: ["analyze", ev, "--report", ev],
    lambda ev: ["replay", ev, "--out", ev.parent, "--iterations", "1"],
    lambda ev: ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--profile", ev, "--out", ev.parent],
    lambda ev: ["fit", ev.parent / "table.csv", "--out", ev.parent / "table.csv"],
])
def test_no_verb_overwrites_its_own_input(events, tmp_path, args):
    (events.parent / "table.csv").write_bytes((ROOT / "examples" / "allreduce_times.csv").read_bytes())
    originals = {p: p.read_bytes() for p in events.parent.iterdir()}
    p = ddlsim_cli(*args(events), cwd=tmp_path)
    one_line_error(p, "input")
    assert sorted(events.parent.iterdir()) == sorted(originals)
    assert all(_same_bytes(path, data) for path, data in originals.items())


def test_convert_never_overwrites_the_chakra_files_it_reads(events, tmp_path):
    assert ddlsim_cli("convert", events, tmp_path / "ck" / "trace.et").returncode == 0
    before = {p: p.read_bytes() for p in (tmp_path / "ck").iterdir()}
    assert len(before) == 3  # 2 workers and a server
    p = ddlsim_cli("convert", tmp_path / "ck" / "trace", tmp_path / "ck" / "trace.et")
    one_line_error(p, "trace.0.et", "input")
    assert {p: p.read_bytes() for p in (tmp_path / "ck").iterdir()} == before


def test_a_symbolic_link_to_a_regular_file_is_written_through(events, tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    os.symlink(real, link)
    p = ddlsim_cli("export", events, "--format", "csv", "--out", link)
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() != "old" and len(real.read_text().splitlines()) == ddlsim.trace.read_event_log(events).table.num_rows + 1


# ----------------------------------------------------------------- full devices, read-only places

@pytest.mark.parametrize("args", [
    lambda ev: ["models"],
    lambda ev: ["models", "--layers", "resnet50"],
    lambda ev: ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--json"],
    lambda ev: ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1"],
    lambda ev: ["analyze", ev, "--json"],
    lambda ev: ["analyze", ev],
    lambda ev: ["fit", ROOT / "examples" / "allreduce_times.csv", "--json"],
])
def test_standard_output_on_a_full_device_is_one_line_and_status_2(events, args):
    with open("/dev/full", "w") as full:
        p = ddlsim_cli(*args(events), stdout=full)
    one_line_error(p, "standard output", "No space left on device")


def test_export_with_standard_output_full_leaves_a_whole_file_and_status_2(events, tmp_path):
    with open("/dev/full", "w") as full:
        p = ddlsim_cli("export", events, "--format", "csv", "--out", tmp_path / "x.csv", stdout=full)
    one_line_error(p, "standard output")
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "x.csv")) == ddlsim.trace.read_event_log(events).table.num_rows


def _file_size_limit(limit: int):
    """A child process whose files may not grow past `limit` bytes: writes past it fail (EFBIG) like on a full
    disk. Needs no root and no mount."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@contextlib.contextmanager
def _tiny_filesystem(where: Path, options: str = "size=16k"):
    """A 16 KiB tmpfs at `where` when this process may mount one (root), else None."""
    where.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                                                    capture_output=True).returncode == 0
    try:
        yield where if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], capture_output=True)


@pytest.mark.parametrize("args, out_name", [
    (lambda ev, out: ["analyze", ev, "--out", out], "analysis"),
    (lambda ev, out: ["export", ev, "--format", "chrome", "--out", out], "trace.json"),
    (lambda ev, out: ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--out", out], "sim"),
    (lambda ev, out: ["analyze", ev, "--report", out], "report.html"),
])
def test_a_full_disk_gives_one_line_and_no_partial_output(events, tmp_path, args, out_name):
    """The filesystem fills up: a 16 KiB tmpfs where mounting is allowed, and always a file-size limit."""
    ways = []
    with _tiny_filesystem(tmp_path / "tiny") as tiny:
        if tiny is not None:
            (tiny / "keep.txt").write_text("mine")
            ways.append((tiny, None))
        limited = tmp_path / "limited"
        limited.mkdir()
        (limited / "keep.txt").write_text("mine")
        ways.append((limited, _file_size_limit(4096)))
        for directory, limit in ways:
            p = ddlsim_cli(*args(events, directory / out_name), preexec_fn=limit, cwd=tmp_path)
            one_line_error(p, out_name)
            assert sorted(x.name for x in directory.iterdir()) == ["keep.txt"], list(directory.iterdir())


@contextlib.contextmanager
def _read_only_directory(tmp_path: Path):
    """A directory nothing can be created in: read-only tmpfs (root that may mount), mode 0555 (not root),
    else a path under /sys (root without mount: no directory can be made there)."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            yield ro
        finally:
            ro.chmod(0o755)
        return
    with _tiny_filesystem(tmp_path / "ro", "ro,size=64k") as ro:
        yield ro if ro is not None else Path("/sys/ddlsim-test-read-only")


@pytest.mark.parametrize("args", [
    lambda ev, ro: ["reproduce", "network-operator", "--quick", "--only", "table1", "--cache", ro, "--out", ev.parent / "o", "-q"],
    lambda ev, ro: ["reproduce", "network-operator", "--quick", "--only", "table1", "--cache", ro / "c", "--out", ev.parent / "o",
                    "-q"],
    lambda ev, ro: ["reproduce", "network-operator", "--quick", "--only", "table1", "--out", ro / "o", "-q"],
    lambda ev, ro: ["analyze", ev, "--out", ro / "x"],
    lambda ev, ro: ["analyze", ev, "--report", ro / "r.html"],
    lambda ev, ro: ["export", ev, "--format", "csv", "--out", ro / "x.csv"],
    lambda ev, ro: ["export", ev, "--format", "kineto", "--out", ro / "k"],
    lambda ev, ro: ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--out", ro / "s"],
    lambda ev, ro: ["fit", ROOT / "examples" / "allreduce_times.csv", "--out", ro / "f.json"],
    lambda ev, ro: ["capture", "ddp", "--model", "lenet5", "--out", ro / "cap"],
    lambda ev, ro: ["capture", "ps", "--out", ro / "cap"],
])
def test_a_read_only_place_gives_one_line(events, tmp_path, args):
    with _read_only_directory(tmp_path) as ro:
        p = ddlsim_cli(*args(events, ro), cwd=tmp_path)
        one_line_error(p, str(ro))
    assert not (events.parent / "o").exists()


# ----------------------------------------------------------------- atomic writes, in-process

def test_an_interrupt_inside_an_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path):
    from ddlsim.safe_io import atomic_file

    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(target) as temporary:
            temporary.write_text("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]


def test_a_staged_directory_checks_every_file_before_moving_any(tmp_path):
    from ddlsim.errors import DdlsimError
    from ddlsim.safe_io import staged_directory

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "b.txt")
    with pytest.raises(DdlsimError, match="b.txt is a FIFO"):
        with staged_directory(out) as stage:
            for name in ("a.txt", "b.txt", "c.txt"):
                (stage / name).write_text(name)
    assert [p.name for p in out.iterdir()] == ["b.txt"]


# ----------------------------------------------------------------- mathtext in user text

def _mathtext_scenario(tmp_path: Path, strategy: str) -> Path:
    scenario = tmp_path / f"{strategy}.toml"
    scenario.write_text(
        f"workers = 2\niterations = 1\n[strategy]\nkind = '{strategy}'\n[model]\nname = '{MATHTEXT}'\n"
        f"[[model.layers]]\nname = '{MATHTEXT}'\nparams = 1000\nfwd_ms = 0.1\nbwd_ms = 0.2\n"
        f"[[model.layers]]\nname = '$x^2$ and $'\nparams = 2000\nfwd_ms = 0.1\nbwd_ms = 0.2\n")
    return scenario


def test_mathtext_in_a_model_name_does_not_break_the_figures(tmp_path):
    ps, ring = _mathtext_scenario(tmp_path, "ps"), _mathtext_scenario(tmp_path, "ring")
    weird = tmp_path / "$a$ and $\\frac{x$"
    for scenario, out in ((ps, weird / "ps"), (ring, weird / "ring")):
        p = ddlsim_cli("simulate", scenario, "--out", out, "-q")
        assert p.returncode == 0, p.stderr
        assert (out / "timeline.png").stat().st_size > 0
    p = ddlsim_cli("analyze", weird / "ps" / "events.parquet", "--compare", weird / "ring" / "events.parquet",
                   "--out", tmp_path / "analysis")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "analysis" / "compare.png").exists() and (tmp_path / "analysis" / "critical_path.svg").exists()


def test_every_figure_escapes_dollars_in_user_text():
    """Each figure drawn from a log whose names are mathtext: every text on it shows the `$` literally
    (escaped), and the figure renders."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from ddlsim.analyze import Analysis, figures, plot

    sc = {"workers": 2, "iterations": 2, "model": {"name": MATHTEXT, "layers": [
        {"name": MATHTEXT, "params": 1000, "fwd_ms": 0.1, "bwd_ms": 0.2},
        {"name": "$y", "params": 3000, "fwd_ms": 0.1, "bwd_ms": 0.2}]}}
    ps = ddlsim.simulate(sc, strategy="ps", servers=1)
    ring = ddlsim.simulate(sc, strategy="ring")
    a, b = Analysis(ps.events, name=f"{MATHTEXT} a"), Analysis(ring.events, name=f"{MATHTEXT} b")
    drawn = [make(a) for make in figures.FIGURES.values()] + [make(b) for make in figures.FIGURES.values()]
    drawn += [figures.compare_figure(a.compare(b)), plot.timeline_figure(ps.events, ps.model.display_name),
              plot.breakdown_figure({MATHTEXT: ps.summary(), "$": ring.summary()}, MATHTEXT)]
    drawn = [f for f in drawn if f is not None]
    assert len(drawn) >= 8
    for fig in drawn:
        fig.canvas.draw()
        for text in fig.findobj(Text):
            s = text.get_text()
            if "frac{x" in s or "$y" in s:  # user text: every dollar escaped (the axes' own 10^k labels are mathtext)
                assert s.count("$") == s.count("\\$"), s
        fig.savefig(io.BytesIO(), format="png")
        fig.savefig(io.BytesIO(), format="svg")
        plt.close(fig)


def test_the_escape_helper():
    from ddlsim.analyze.plot import plain_text

    assert plain_text(MATHTEXT) == "\\$\\frac{x\\$"
    assert plain_text("no dollars") == "no dollars"
    assert plain_text(plain_text("$a$")) == "\\$a\\$"  # idempotent: an escaped dollar stays one escape
    assert plain_text(3) == "3"


@pytest.mark.parametrize("verb", ["simulate", "analyze", "export"])
def test_a_path_too_long_for_the_file_system_is_one_line_and_status_2(verb, tmp_path):
    # ENAMETOOLONG from a stat of the named input escaped as a traceback (found after the fuzz campaign)
    name = str(tmp_path / ("x" * 5000))
    argv = {"simulate": [name], "analyze": [name], "export": [name, "--format", "csv", "--out", str(tmp_path / "o.csv")]}[verb]
    proc = subprocess.run([sys.executable, "-m", "ddlsim", verb, *argv], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert len(lines[0]) < 400


# ----------------------------------------------------------------- Ctrl-C at every step of a write

def _interrupt_at(step: int, action) -> int:
    """Runs `action()` with Ctrl-C's handler (the CLI's) run at its `step`-th traced event
    (every line and bytecode of every Python frame below it: shutil.rmtree, contextlib, pathlib);
    then the CLI's step after an interrupt unwound. Returns how many events there were."""
    from ddlsim.cli import progress
    from ddlsim.safe_io import remove_leftover_scratch

    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += 1
        if count == step:
            progress._first_signal = None
            progress._on_signal(signal.SIGINT, None)  # raises Interrupted, as a signal handled here would
        return local

    def on_call(frame, event, arg):
        frame.f_trace_opcodes = True
        return local(frame, event, arg)

    sys.settrace(on_call)
    try:
        action()
    except progress.Interrupted:
        pass
    finally:
        sys.settrace(None)
        remove_leftover_scratch()
    return count


def _every_step(action, check) -> int:
    """_interrupt_at for every step until one runs to the end; `check(step)` after each."""
    step = 1
    while True:
        events = _interrupt_at(step, action)
        check(step)
        if events < step:
            return step
        step += 1


def test_ctrl_c_at_any_step_of_an_atomic_write_leaves_old_or_new_and_no_scratch(tmp_path):
    """The CI failure of stop 35: a Ctrl-C that landed inside atomic_file's clean-up
    (shutil.rmtree is Python) left a `.<name>.<random>.tmp` directory in a sweep's summary/."""
    from ddlsim.safe_io import atomic_file

    target = tmp_path / "a.json"

    def write():
        with atomic_file(target) as temporary:
            temporary.write_text("new")

    def check(step):
        assert [p.name for p in tmp_path.iterdir()] == ["a.json"], step
        assert target.read_text() in ("old", "new"), step
        target.write_text("old")

    target.write_text("old")
    steps = _every_step(write, check)
    assert steps > 200  # the rmtree, mkdir and rename steps were all reached


@pytest.mark.parametrize("exists", [False, True])
def test_ctrl_c_at_any_step_of_a_staged_directory_leaves_no_scratch_and_a_new_directory_only_whole(tmp_path, exists):
    from ddlsim.safe_io import staged_directory

    out = tmp_path / "out"

    def write():
        with staged_directory(out) as stage:
            (stage / "a.txt").write_text("new")
            (stage / "b.txt").write_text("new")

    def check(step):
        if exists:
            names = sorted(p.name for p in out.iterdir())
            assert names in (["keep"], ["a.txt", "keep"], ["a.txt", "b.txt", "keep"]), (step, names)
            for p in out.iterdir():
                p.unlink() if p.name != "keep" else None
        else:
            # a directory this call created: gone, or there with both files
            assert not out.exists() or sorted(p.name for p in out.iterdir()) == ["a.txt", "b.txt"], step
            if out.exists():
                for p in out.iterdir():
                    p.unlink()
                out.rmdir()

    if exists:
        out.mkdir()
        (out / "keep").write_text("mine")
    steps = _every_step(write, check)
    assert steps > 200
    assert not exists or (out / "keep").read_text() == "mine"


_INTERRUPTING_CLI = """
import signal, sys
from pathlib import Path
from ddlsim.cli import main, progress

target, when = Path(sys.argv[1]), int(sys.argv[2])
lines = 0

def scratch_there():  # a staging directory, or an atomic file's scratch directory
    return any(p.name.startswith(".") for p in target.parent.iterdir())

def line(frame, event, arg):
    global lines
    if event == "line" and scratch_there() and (when == 0 or target.exists()):
        lines += 1
        if lines == max(when, 1):
            sys.settrace(None)
            progress._first_signal = None
            progress._on_signal(signal.SIGINT, None)  # Ctrl-C, handled at this line
    return line

def call(frame, event, arg):
    return line if frame.f_globals.get("__name__") in ("ddlsim.safe_io", "shutil") else None

sys.argv = ["ddlsim", *sys.argv[3:]]
sys.settrace(call)
main()
"""


@pytest.mark.parametrize("when", [0, 1, 2, 3, 4])
def test_ctrl_c_once_the_scratch_is_made_or_in_the_clean_up_after_the_rename_leaves_no_scratch(events, tmp_path, when):
    """The CLI end to end: Ctrl-C handled at the first line of safe_io once the scratch directory
    exists (0), or at the `when`-th line of safe_io or shutil once the output is in place and the
    scratch not yet removed (the sweep's CI failure: the signal came as the summary file appeared,
    and cut shutil.rmtree short); status 130, the output whole or absent, no scratch."""
    out = tmp_path / "o" / "x.csv"
    out.parent.mkdir()
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTING_CLI, out, str(when), "export", events, "--format", "csv",
                           "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 130 and "interrupted" in proc.stderr, proc.stderr
    no_scratch(out.parent)
    assert [p.name for p in out.parent.iterdir()] == ([] if when == 0 else ["x.csv"])


_LEFT_BY_AN_INTERRUPT = """
import os, sys
from pathlib import Path
from ddlsim import safe_io

scratch = safe_io._scratch_directory(Path(sys.argv[1]), ".left-")  # as if a KeyboardInterrupt cut its removal short
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a forked child's exit runs the atexit hooks: it must not remove its parent's scratch
os.waitpid(pid, 0)
print("there" if scratch.is_dir() else "gone")
"""


def test_the_python_api_removes_a_scratch_directory_left_by_an_interrupt_at_exit_and_a_forked_child_never(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _LEFT_BY_AN_INTERRUPT, tmp_path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "there\n", proc.stderr
    assert list(tmp_path.iterdir()) == []  # removed at the interpreter's exit


@pytest.mark.parametrize("case", ["missing parent", "exists", "parent is a file"])
def test_create_scratch_fails_as_os_mkdir_does(tmp_path, case):
    """Same class, errno and strerror as os.mkdir: the callers catch FileExistsError and print strerror."""
    from ddlsim import _core

    (tmp_path / "there").mkdir()
    (tmp_path / "file").write_text("x")
    path = {"missing parent": tmp_path / "no" / "d", "exists": tmp_path / "there",
            "parent is a file": tmp_path / "file" / "d"}[case]
    with pytest.raises(OSError) as expected:
        os.mkdir(path)
    with pytest.raises(OSError) as got:
        _core.create_scratch(str(path))
    assert (type(got.value), got.value.errno, got.value.strerror) == \
        (type(expected.value), expected.value.errno, expected.value.strerror)
    assert _core.remove_registered_scratch() == 0  # nothing registered by a failure
    assert (tmp_path / "there").is_dir()
