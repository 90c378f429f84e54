# The two quick-start commands are `make demo` and `make test`; both install
# what they need first (Rust toolchain check, Python package + deps).
PYTHON ?= python3

.PHONY: install demo test bench

install:
	@command -v cargo >/dev/null 2>&1 || { echo "cargo not found: installing Debian's Rust toolchain"; apt-get update -q && apt-get install -y -q cargo; }
	$(PYTHON) -m pip install -q --disable-pip-version-check -e ".[test]"

demo: install
	$(PYTHON) -m ddlsim demo --out ddlsim-out

test: install
	cargo test -q -p ddlsim-core
	$(PYTHON) -m pytest -q -p no:cacheprovider

bench: install
	$(PYTHON) benchmarks/bench_scale.py
