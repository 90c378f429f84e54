# The two quick-start commands are `make demo` and `make test`. Both install
# what they need first: a Rust toolchain new enough (tools/ensure-rust.sh
# installs Debian's cargo-web/rustc-web when there is none), a virtualenv in
# .venv (the system Python is "externally managed" on Debian and Ubuntu),
# and ddlsim with its test dependencies inside it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install install-interop rust rust-test browser demo test test-floors bench clean-venv

rust:
	@sh tools/ensure-rust.sh

# Debian's Python makes virtualenvs only with python3-venv: installed here if missing (after `rust`, whose
# apt-get may run: two at once would fight over dpkg's lock).
$(PY): | rust
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  command -v apt-get >/dev/null 2>&1 || { echo "$(PYTHON) cannot make a virtualenv"; exit 1; }; \
	  echo "installing python3-venv"; \
	  SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get install -y -q python3-venv || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q python3-venv; }; \
	  $(PYTHON) -m venv $(VENV); }
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip

# ddlsim and its dependencies are installed with uv (Astral's `uv pip install`, itself installed from PyPI into the
# venv): the same packages pip resolves, in half the time (make test's install from nothing, 2 cores: 119 s
# against pip's 234 s; uv downloads and unpacks in parallel). Where uv cannot be installed, pip installs them.
UV := $(VENV)/bin/uv
PIP_INSTALL = sh -c 'if [ -x "$$0" ]; then exec "$$0" pip install --python $(PY) --compile-bytecode -q "$$@"; \
	else exec $(PY) -m pip install -q --disable-pip-version-check "$$@"; fi' $(UV)

$(UV): | $(PY)
	@$(PY) -m pip install -q --disable-pip-version-check uv || echo "uv could not be installed: pip installs instead"

install: rust $(PY) $(UV)
	$(PIP_INSTALL) -e ".[test]"

# `make test` also installs the interop extra (protobuf for Chakra, HolisticTraceAnalysis for the Kineto test),
# the capture extra (PyTorch: the capture tests run real 2-4 process jobs on CPU with gloo) and the sweep
# extra (Ray: the sweep tests start a small local Ray instance; where Ray has no wheel for this Python,
# those tests skip and say so). One install (each resolves every dependency again and rebuilds the wheel).
install-interop: rust $(PY) $(UV)
	$(PIP_INSTALL) -e ".[test,interop,capture,sweep]" || { \
	  echo "the install with Ray failed (Ray may have no wheel for this Python): installing without it;" \
	       "the ddlsim sweep --ray tests will skip"; \
	  $(PIP_INSTALL) -e ".[test,interop,capture]"; }

demo: install
	$(PY) -m ddlsim demo --out ddlsim-out

# The analysis report is checked in a real browser: Debian's chromium,
# installed here when missing (as root or through sudo). Without it that one
# test skips and says so; nothing else needs it.
browser: | $(PY)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && { SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO="sudo -n"; \
	  echo "installing chromium (headless browser for the report test)"; \
	  $$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || { $$SUDO apt-get update -q >/dev/null 2>&1 && \
	  $$SUDO apt-get install -y -q chromium >/dev/null 2>&1; }; } || true; }

# `make test`: the Rust tests (in a build directory of their own, so that they build and run while the packages
# are downloaded and installed and the wheel is built) and the browser alongside the install; then the Python suite on TEST_PROCESSES
# processes (pytest-xdist; tests/conftest.py says what goes together). ddlsim's modules are compiled once first:
# where PYTHONDONTWRITEBYTECODE is set, each of the suite's processes compiled them again.
TEST_PROCESSES ?= 2
test:
	@$(MAKE) --no-print-directory -j3 install-interop browser rust-test
	$(PY) -m compileall -q python/ddlsim
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) --durations=25

rust-test: rust
	CARGO_TARGET_DIR=target/rust-test cargo test -q -p ddlsim-core

# The suite on the oldest declared Python and dependency versions (tools/floors.txt);
# FLOOR_PYTHON must be a Python 3.9 (e.g. from pyenv).
FLOOR_PYTHON ?= python3.9
test-floors: rust
	$(FLOOR_PYTHON) -m venv .venv-floors
	.venv-floors/bin/python -m pip install -q --disable-pip-version-check -c tools/floors.txt -e ".[test]"
	.venv-floors/bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning

bench: install
	$(PY) benchmarks/bench_scale.py

clean-venv:
	rm -rf $(VENV)
