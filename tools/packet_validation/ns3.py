"""Builds and runs the ns-3 reference scenarios (ns3_scenarios.cc beside this file).

ns-3 comes from the package index as the `ns3` wheel (3.44), installed into a
virtual environment of its own under the cache directory (never into
ddlsim's environment; ddlsim does not depend on it). The scenario is a
compiled C++ program built with g++ against the wheel's headers and shared
libraries, so no Python runs per packet.

    python tools/packet_validation/ns3.py [--cache DIR] -- --scenario=incast --transport=dctcp --queue-limit=100 --ecn-k=65

prints the program's output: one JSON object per flow, then a summary line.
The first run downloads the wheel (about 100 MB) and compiles the program
(a minute on one core); later runs reuse both. Exit status 2 with a one-line
message when g++, the wheel or the compile fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ns3_scenarios.cc"
WHEEL = "ns3==3.44.post0"
NS3_VERSION = "3.44"
LIBS = ["traffic-control", "point-to-point", "internet", "network", "core"]
# The wheel's own compile definitions (its CMake package config): headers must see the same.
DEFINES = ["-DNS3_LOG_ENABLE", "-DNS3_ASSERT_ENABLE", "-DNS3_BUILD_PROFILE_RELEASE"]


class SetupError(Exception):
    """ns-3 could not be installed or the scenario program not built (one line, for the user)."""


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ddlsim" / "ns3"


def say(message: str) -> None:
    print(f"[ns3] {message}", file=sys.stderr, flush=True)


def _venv_python(env: Path) -> Path:
    return env / "bin" / "python"


def ensure_ns3(cache: Path) -> Path:
    """The installed wheel's `ns3` directory (include/, lib64/), installing it on first use."""
    env = cache / "venv"
    py = _venv_python(env)
    found = _find_ns3(env)
    if found is not None:
        return found
    if env.exists() and not py.exists():
        raise SetupError(f"{env} exists but is not a virtual environment; remove it or choose another --cache")
    if not py.exists():
        say(f"creating a virtual environment for ns-3 in {env}")
        cache.mkdir(parents=True, exist_ok=True)
        try:
            venv.EnvBuilder(with_pip=True).create(env)
        except Exception as exc:  # ensurepip missing, disk full ...
            raise SetupError(f"could not create a virtual environment in {env}: {exc}") from None
    say(f"installing {WHEEL} into {env} (about 100 MB, once)")
    done = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", WHEEL],
                          capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SetupError(f"pip could not install {WHEEL} into {env}: {last}")
    found = _find_ns3(env)
    if found is None:
        raise SetupError(f"the {WHEEL} wheel in {env} has no include/ns3 headers or libns3 libraries")
    return found


def _find_ns3(env: Path) -> Path | None:
    for site in sorted(env.glob("lib/python3*/site-packages")):
        root = site / "ns3"
        if (root / "include" / "ns3" / "core-module.h").is_file() and any((root / "lib64").glob("libns3*-core.so")):
            return root
    return None


def ensure_binary(cache: Path) -> Path:
    """The compiled scenario program, built when the source (or the wheel) changed."""
    gxx = shutil.which(os.environ.get("CXX", "g++"))
    if gxx is None:  # before the 100 MB download
        raise SetupError("g++ not found: install a C++20 compiler (apt-get install g++) or name one in CXX")
    root = ensure_ns3(cache)
    digest = hashlib.sha256(SOURCE.read_bytes() + str(root).encode()).hexdigest()[:16]
    binary = cache / "build" / f"ns3_scenarios-{digest}"
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    lib = root / "lib64"
    tmp = binary.with_suffix(".tmp")
    cmd = [gxx, "-std=c++20", "-O2", *DEFINES, f"-I{root / 'include'}", str(SOURCE), "-o", str(tmp),
           f"-L{lib}", f"-Wl,-rpath,{lib}", *[f"-lns{NS3_VERSION}-{name}" for name in LIBS]]
    say(f"compiling {SOURCE.name} against ns-3 {NS3_VERSION} (about a minute)")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.strip().splitlines() or ["?"]
        raise SetupError(f"g++ could not build {SOURCE.name}: {errors[0]}")
    tmp.replace(binary)
    return binary


def run(args: list[str], cache: Path | None = None, timeout: float | None = None) -> tuple[list[dict], dict]:
    """Runs the scenario program with `args` (its --name=value options); returns (flows, summary)."""
    cache = cache or default_cache()
    try:
        binary = ensure_binary(cache)
    except OSError as exc:
        raise SetupError(f"{exc.filename or cache}: {exc.strerror or exc}; choose another --cache") from None
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    flows = [line for line in lines if "flow" in line]
    summary = next((line["summary"] for line in lines if "summary" in line), None)
    if summary is None:
        detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SetupError(f"ns3_scenarios {' '.join(args)} failed: {detail}")
    return flows, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after -- go to the scenario program (--PrintHelp lists them).")
    parser.add_argument("--cache", type=Path, default=None, help=f"where the venv and the build go (default {default_cache()})")
    parser.add_argument("--build-only", action="store_true", help="install and compile, print the program's path")
    parser.add_argument("program_args", nargs="*", help="the scenario program's options")
    ns = parser.parse_args(argv)
    cache = ns.cache or default_cache()
    try:
        binary = ensure_binary(cache)
        if ns.build_only:
            print(binary)
            return 0
        done = subprocess.run([str(binary), *ns.program_args])
        return done.returncode
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the cache is not writable, a path component is a file ...
        print(f"error: {exc.filename or cache}: {exc.strerror or exc}; choose another --cache", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
