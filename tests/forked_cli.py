"""`python -m ddlsim ARGS` (and `python -c CODE`: `run_code`) in a process of its own, about ten times faster than a
fresh interpreter for the many tests that run a command which ends at once (a refusal, a small simulation): a server
process imports the command line and the modules most commands import on their way (typer, rich, numpy, pyarrow,
pydantic, ddlsim's CLI, scenario and event log: about a second on 2 cores, what each fresh `python -m ddlsim` paid)
once, and forks a child for each run; the child takes the run's working directory, environment and argv, then runs
the `ddlsim` module as `__main__` exactly as `python -m ddlsim` does (runpy), or the code as a new `__main__` module,
its standard input /dev/null and its standard output and error files of the server's, and ends as that interpreter
would (its exit status, a traceback where one escaped). What a run changes (signals, modules, the environment, the
working directory) dies with its child. Use a real subprocess for what needs the interpreter's start (import-time
behaviour, what is imported before a refusal) or a signal sent from outside.

The server is single-threaded (fork is safe) and one per test session; it ends when the session's end closes its
standard input."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SERVER = r"""
import json, os, sys, tempfile
replies = os.fdopen(os.dup(1), "w")           # the child's fd 1 is its own stdout file
scratch = tempfile.mkdtemp(prefix="ddlsim-forked-cli-")
import ddlsim.cli.app                          # what every `python -m ddlsim` imports first, then what most commands
import numpy, pandas, pyarrow.parquet, pydantic, rich.console  # import on their way (imported, a module runs nothing more)
import ddlsim.analyze.breakdown, ddlsim.api, ddlsim.cli.progress, ddlsim.safe_io, ddlsim.simulation.run
import ddlsim.simulation.scenario, ddlsim.trace.parquet
for line in sys.stdin:
    request = json.loads(line)
    out, err = os.path.join(scratch, "out"), os.path.join(scratch, "err")
    pid = os.fork()
    if pid == 0:
        replies.close()
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if (not os.environ.get("LC_ALL") and os.environ.get("PYTHONCOERCECLOCALE") != "0"
                and (os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "C") in ("C", "POSIX")):
            os.environ["LC_CTYPE"] = "C.UTF-8"  # the C locale coerced at start, as CPython does (PEP 538)
        tempfile.tempdir = None                # TMPDIR as this run's environment gives it
        import atexit, runpy, types
        try:
            if "code" in request:                 # python -c CODE: the code run in a new __main__ module
                sys.argv = ["-c"]
                main = types.ModuleType("__main__")
                main.__dict__["__builtins__"] = __builtins__
                sys.modules["__main__"] = main
                exec(compile(request["code"], "<string>", "exec"), main.__dict__)
            else:                                 # python -m ddlsim ARGS
                sys.argv = ["ddlsim", *request["args"]]
                runpy.run_module("ddlsim", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:                 # as the interpreter takes sys.exit's argument
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            kind, value, tb = sys.exc_info()      # the traceback, as an uncaught exception prints it (for code,
            if "code" in request:                 # without this server's frame)
                tb = tb.tb_next
                value.with_traceback(tb)
            sys.excepthook(kind, value, tb)
            code = 1
        atexit._run_exitfuncs()                   # the run's own atexit functions, then its buffered output; the
        for stream in (sys.stdout, sys.stderr):   # rest of the interpreter's shutdown (freeing every module) only
            try:                                  # takes time
                stream.flush()
            except OSError:
                code = code or 120
        os._exit(code)
    replies.write(json.dumps({"pid": pid}) + "\n")  # the client kills it (and only it) past its timeout
    replies.flush()
    _, status = os.waitpid(pid, 0)
    with open(out, encoding="utf-8", errors="replace") as o, open(err, encoding="utf-8", errors="replace") as e:
        reply = {"returncode": os.waitstatus_to_exitcode(status), "stdout": o.read(), "stderr": e.read()}
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
import shutil
shutil.rmtree(scratch)
"""

_server: subprocess.Popen | None = None
_lock = threading.Lock()


def _start() -> subprocess.Popen:
    global _server
    if _server is None or _server.poll() is not None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, env=env)
        atexit.register(_server.stdin.close)
    return _server


def run(args: list, *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m ddlsim ARGS` in `cwd` (None: this process's) with exactly the environment `env` (None: this
    process's), as subprocess.run(..., capture_output=True, text=True) returns it."""
    return _run({"args": [str(a) for a in args]}, ["-m", "ddlsim", *map(str, args)], cwd, env, timeout)


def run_code(code: str, *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -c CODE` the same way: the code runs as the `__main__` module of a forked child (a docs snippet
    that imports ddlsim, numpy or pandas finds them imported)."""
    return _run({"code": code}, ["-c", code], cwd, env, timeout)


def _run(request: dict, argv: list[str], cwd, env, timeout: float) -> subprocess.CompletedProcess:
    cwd = os.getcwd() if cwd is None else cwd
    env = dict(os.environ) if env is None else env
    with _lock:
        server = _start()
        server.stdin.write(json.dumps({**request, "cwd": str(cwd), "env": env}) + "\n")
        server.stdin.flush()
        child, fired = json.loads(server.stdout.readline())["pid"], []

        def kill() -> None:
            fired.append(True)
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:  # it had ended
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            reply = json.loads(server.stdout.readline())  # the server waits for the child, killed or not
        finally:
            timer.cancel()
        if fired:
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, reply["stdout"], reply["stderr"])
    return subprocess.CompletedProcess([sys.executable, *argv], reply["returncode"], reply["stdout"], reply["stderr"])
