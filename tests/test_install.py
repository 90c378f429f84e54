"""Install from nothing: `make` finds or installs a Rust toolchain new
enough for Cargo.lock v4 and the dependencies (tools/ensure-rust.sh), with
fake cargo/apt-get on PATH so that nothing is installed for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(sys.platform == "win32" or shutil.which("make") is None, reason="POSIX shell and make")


def _fake_bin(tmp_path: Path, cargo_version: str | None) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"

    def script(name: str, body: str) -> None:
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)

    def toolchain(version: str) -> None:
        script("cargo", f'echo "cargo {version} (fake)"')
        script("rustc", f'echo "rustc {version} (fake)"')

    if cargo_version:
        toolchain(cargo_version)
    # apt-get "installs" cargo-web/rustc-web 1.85 as /usr/bin/cargo would: a new cargo on PATH
    script("apt-get", f'echo "apt-get $*" >> "{log}"\n'
                      f'case "$*" in *"install -y -q cargo-web rustc-web"*) '
                      f'printf "#!/bin/sh\\necho cargo 1.85.0\\n" > "{bin_dir}/cargo"; '
                      f'printf "#!/bin/sh\\necho rustc 1.85.0\\n" > "{bin_dir}/rustc"; '
                      f'chmod +x "{bin_dir}/cargo" "{bin_dir}/rustc";; esac')
    script("apt-cache", "exit 0")
    script("sudo", 'exec "$@"')
    return bin_dir


def _make_rust(bin_dir: Path) -> subprocess.CompletedProcess:
    # PATH has no ~/.cargo/bin, and the fakes come before any real cargo in /usr/bin
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "rust"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_debians_old_cargo_is_replaced_by_cargo_web(tmp_path):
    run = _make_rust(_fake_bin(tmp_path, "1.63.0"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "older than 1.78.0" in run.stdout
    assert "install -y -q cargo-web rustc-web" in (tmp_path / "apt.log").read_text()
    assert "using cargo 1.85.0" in run.stdout


def test_a_missing_cargo_is_installed_from_cargo_web(tmp_path):
    bin_dir = _fake_bin(tmp_path, None)
    if shutil.which("cargo", path="/usr/bin:/bin"):
        pytest.skip("a real cargo in /usr/bin would be found first")
    run = _make_rust(bin_dir)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "install -y -q cargo-web rustc-web" in (tmp_path / "apt.log").read_text()


def test_a_new_enough_cargo_is_left_alone(tmp_path):
    run = _make_rust(_fake_bin(tmp_path, "1.96.0"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert not (tmp_path / "apt.log").exists()
