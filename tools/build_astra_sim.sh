#!/usr/bin/env bash
# Build ASTRA-sim's analytical backends (a reference simulator for validation only: never vendored, never a
# dependency of ddlsim) and print the binary's path on the last line of stdout.
#
#   tools/build_astra_sim.sh                      # clone the pinned commit with its submodules into the work dir
#   tools/build_astra_sim.sh --src ~/astra-sim    # use an existing checkout (its submodules already populated)
#   tools/build_astra_sim.sh --mirror-root DIR    # clone from local bare mirrors DIR/<owner>+<name>/repo
#   DDLSIM_ASTRA_SIM=$(tools/build_astra_sim.sh | tail -n1) python -m pytest tests/test_interop_chakra_peers.py -k astra
#
# Needs git, CMake >= 3.15, a C++17 compiler, protoc and the protobuf headers and library
# (Debian: apt-get install cmake g++ protobuf-compiler libprotobuf-dev). Builds on --jobs cores (default 1).
set -euo pipefail

# The newest ASTRA-sim commit (2024-10-23, "Merge pull request #227 from astra-sim/ADD_TESTS") whose analytical
# build needs nothing but its own submodules (later ones fetch yaml-cpp at configure time); see docs/interop.md.
COMMIT=fdf2c9c34913f8cc56e765b6c37389720c44d2b9
URL=https://github.com/astra-sim/astra-sim.git
WORK=${TMPDIR:-/tmp}/ddlsim-astra-sim
SRC=
MIRROR_ROOT=
JOBS=1
TARGET=congestion_unaware
# the submodules the analytical build compiles (not ns-3, htsim, garnet)
SUBMODULES=(extern/graph_frontend/chakra extern/network_backend/analytical extern/remote_memory_backend/analytical
            extern/helper/fmt extern/helper/spdlog)

die() { echo "build_astra_sim.sh: $*" >&2; exit 2; }
usage() {
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

options:
  --src DIR          an existing ASTRA-sim checkout with its submodules (nothing is cloned; the build goes to
                     DIR/build/astra_analytical/build as ASTRA-sim's own build.sh puts it)
  --commit SHA       the commit to clone (default $COMMIT)
  --url URL          the repository to clone (default $URL)
  --mirror-root DIR  clone the repository and its submodules from bare mirrors DIR/<owner>+<name>/repo
  --work DIR         where to clone and build (default $WORK; never inside the ddlsim repository)
  --target T         congestion_unaware (default), congestion_aware or all
  --jobs N           parallel compile jobs (default 1)
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --src) SRC=${2:?--src needs a directory}; shift 2 ;;
        --commit) COMMIT=${2:?--commit needs a commit}; shift 2 ;;
        --url) URL=${2:?--url needs a URL}; shift 2 ;;
        --mirror-root) MIRROR_ROOT=${2:?--mirror-root needs a directory}; shift 2 ;;
        --work) WORK=${2:?--work needs a directory}; shift 2 ;;
        --target) TARGET=${2:?--target needs a value}; shift 2 ;;
        --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done

case "$TARGET" in congestion_unaware|congestion_aware|all) ;; *) die "--target must be congestion_unaware, congestion_aware or all, not '$TARGET'" ;; esac
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, not '$JOBS'"
[[ "$COMMIT" =~ ^[0-9a-fA-F]{7,40}$ ]] || die "--commit must be a commit SHA (7 to 40 hex digits), not '$COMMIT'"
# git reads the sources; the build tools are checked once the sources are there (a missing mirror or commit is
# reported first, whatever this machine has installed)
need_tools() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || die "'$tool' not found (Debian: apt-get install git cmake g++ protobuf-compiler libprotobuf-dev)"
    done
}
need_tools git

# a GitHub URL (https or ssh form) -> the local mirror DIR/<owner>+<name>/repo when --mirror-root is given
resolve() {
    local url=$1
    if [[ -z "$MIRROR_ROOT" ]]; then echo "$url"; return; fi
    local path=${url#*github.com[:/]}
    path=${path%.git}
    local mirror="$MIRROR_ROOT/${path%%/*}+${path#*/}/repo"
    [[ -d "$mirror" ]] || die "no mirror of $url at $mirror"
    echo "$mirror"
}

# init the named submodules of the checkout in $1 from their (possibly mirrored) URLs at the pinned commits
submodules() {
    local dir=$1; shift
    local path url from
    for path in "$@"; do
        url=$(git -C "$dir" config -f .gitmodules --get "submodule.$path.url" 2>/dev/null) || continue
        from=$(resolve "$url")
        git -C "$dir" submodule init -- "$path" >/dev/null
        git -C "$dir" config "submodule.$path.url" "$from"
        git -C "$dir" -c protocol.file.allow=always submodule update --quiet -- "$path" >&2
    done
}

if [[ -n "$SRC" ]]; then
    [[ -f "$SRC/build/astra_analytical/CMakeLists.txt" ]] || die "--src $SRC is not an ASTRA-sim checkout (no build/astra_analytical/CMakeLists.txt)"
    SRC=$(cd "$SRC" && pwd)
    [[ -f "$SRC/extern/graph_frontend/chakra/schema/protobuf/et_def.proto" ]] \
        || die "--src $SRC has no chakra submodule: run 'git submodule update --init --recursive' there"
else
    if git -C "$(dirname "$0")" rev-parse --show-toplevel >/dev/null 2>&1; then
        top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
        case "$(realpath -m "$WORK")/" in "$(realpath -m "$top")"/*) die "--work $WORK is inside the ddlsim repository; use a directory outside it" ;; esac
    fi
    SRC="$WORK/astra-sim-$COMMIT"
    if [[ ! -f "$SRC/.ddlsim-checkout-done" ]]; then
        [[ -e "$SRC" ]] && die "$SRC exists but is not a finished checkout of this script; remove it or pick another --work"
        from=$(resolve "$URL")  # a missing mirror ends the script here (exit 2), before anything is created
        made_work=; [[ -d "$WORK" ]] || made_work=1
        mkdir -p "$WORK"
        # a failed clone or checkout leaves nothing behind (this run made $SRC, and $WORK if it was not there)
        undo() { rm -rf "$SRC"; [[ -z "$made_work" ]] || rmdir "$WORK" 2>/dev/null || true; die "$1"; }
        if ! msg=$(git clone --quiet --no-checkout "$from" "$SRC" 2>&1 >/dev/null); then
            undo "could not clone $from (git: ${msg##*$'\n'}); check --url or --mirror-root"
        fi
        if ! msg=$(git -C "$SRC" -c advice.detachedHead=false checkout --quiet "$COMMIT" 2>&1 >/dev/null); then
            undo "commit $COMMIT cannot be checked out from $from (git: ${msg##*$'\n'}); check --commit"
        fi
        submodules "$SRC" "${SUBMODULES[@]}"
        # the analytical network backend's own yaml-cpp
        [[ -f "$SRC/extern/network_backend/analytical/.gitmodules" ]] \
            && submodules "$SRC/extern/network_backend/analytical" extern/yaml-cpp
        touch "$SRC/.ddlsim-checkout-done"
    fi
fi

need_tools cmake protoc c++
# chakra's protobuf schema -> C++ (what ASTRA-sim's build/astra_analytical/build.sh does first)
PROTO="$SRC/extern/graph_frontend/chakra/schema/protobuf"
if [[ ! -f "$PROTO/et_def.pb.cc" || ! -f "$PROTO/et_def.pb.h" ]]; then
    protoc et_def.proto --proto_path="$PROTO" --cpp_out="$PROTO"
fi

BUILD="$SRC/build/astra_analytical/build"
mkdir -p "$BUILD"
cmake -S "$SRC/build/astra_analytical" -B "$BUILD" -DBUILDTARGET="$TARGET" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$BUILD" -j "$JOBS" >&2

case "$TARGET" in
    congestion_unaware) names=(AstraSim_Analytical_Congestion_Unaware) ;;
    congestion_aware) names=(AstraSim_Analytical_Congestion_Aware) ;;
    all) names=(AstraSim_Analytical_Congestion_Aware AstraSim_Analytical_Congestion_Unaware) ;;
esac
echo "ASTRA-sim $(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo '(not a git checkout)')" >&2
for name in "${names[@]}"; do
    [[ -x "$BUILD/bin/$name" ]] || die "the build finished but $BUILD/bin/$name is missing"
    echo "$BUILD/bin/$name"
done
