#!/bin/sh
# Makes sure a Rust toolchain new enough for ddlsim is on PATH (cargo and
# rustc >= RUST_MIN: Cargo.lock version 4 needs cargo 1.78, rustc-hash 2
# needs rustc 1.77). If there is none, or only an older one (Debian 12's
# `cargo` package is 1.63), installs Debian's newer toolchain, the
# `cargo-web` and `rustc-web` packages (1.85 or newer, /usr/bin/cargo), with
# apt-get (as root, or through sudo). Elsewhere it says how to get one.
set -eu
RUST_MIN=${RUST_MIN:-1.78.0}

version_of() { "$1" --version 2>/dev/null | awk '{print $2}'; }

new_enough() {  # $1: a version such as 1.85.0
    [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$RUST_MIN" "$1" | sort -V | head -n1)" = "$RUST_MIN" ]
}

ok() {
    command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 \
        && new_enough "$(version_of cargo)" && new_enough "$(version_of rustc)"
}

if ok; then
    exit 0
fi
if command -v cargo >/dev/null 2>&1; then
    echo "cargo $(version_of cargo) / rustc $(version_of rustc || true) is older than $RUST_MIN, which ddlsim needs"
else
    echo "no Rust toolchain (cargo) on PATH"
fi
if command -v apt-get >/dev/null 2>&1; then
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "installing Rust needs root: run 'apt-get install cargo-web rustc-web' as root"; exit 1; }
        SUDO=sudo
    fi
    apt-cache show cargo-web >/dev/null 2>&1 || $SUDO apt-get update -q
    if apt-cache show cargo-web >/dev/null 2>&1; then
        echo "installing Debian's cargo-web and rustc-web"
        $SUDO apt-get install -y -q cargo-web rustc-web
        hash -r 2>/dev/null || true
        if ok; then
            echo "using cargo $(version_of cargo) ($(command -v cargo))"
            exit 0
        fi
        echo "cargo on PATH is still $(version_of cargo || echo missing) ($(command -v cargo || true)); put /usr/bin first in PATH"
        exit 1
    fi
fi
echo "install Rust $RUST_MIN or newer, e.g. with rustup (https://rustup.rs), then run make again"
exit 1
