#!/usr/bin/env bash
# MegEngine 1.13's own C++ load_and_run for the tests (issue 52): built by ../shared/real-lar/build.sh
# against this venv's wheel into a cache folder outside the source tree, keyed by the script, its
# tarballs and the wheel's site-packages, so it is rebuilt only when one of them changes.
#
#   real-lar.sh build   build when missing (make real-lar); exit 0 built or skipped, 1 failed
#   real-lar.sh path    print the folder the binary is (or would be) in; exit 0
#
# Without the sources (a user's machine) `build` says so and exits 0; the tests marked real_lar
# skip with that reason. Under CI=true a missing source or a failed build is exit 1: CI runs them.
# Environment: LAR_PREC_REAL_LAR_SRC (default ../shared/real-lar from the repo root),
# XDG_CACHE_HOME (default ~/.cache), PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${LAR_PREC_REAL_LAR_SRC:-../shared/real-lar}
PY=${PYTHON:-.venv/bin/python}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/lar-prec/real-lar

fail_or_skip() {  # a missing tool is a skip on a user's machine, a failure in CI
    if [ "${CI:-}" = true ]; then echo "real-lar: $1 (CI=true: the real_lar tests must run)" >&2; exit 1; fi
    echo "real-lar: $1; the tests marked real_lar will be skipped"; exit 0
}

key_dir() {
    local site
    site=$(realpath "$("$PY" -c 'import site; print(site.getsitepackages()[0])')")
    # The binary's RPATH names the site-packages: a different venv is a different build.
    echo "$CACHE/$( { cat "$SRC/build.sh" "$SRC"/*.tar.xz; echo "$site"; } | sha256sum | cut -c1-16)"
}

case "${1:-}" in
path)
    [ -f "$SRC/build.sh" ] || { echo ""; exit 0; }
    key_dir ;;
build)
    [ -f "$SRC/build.sh" ] || fail_or_skip "no $SRC/build.sh (the real load_and_run's sources)"
    OUT=$(key_dir)
    mkdir -p "$OUT"
    exec 9>"$OUT.lock"
    flock 9  # two checkouts building the same key wait for one another
    if [ -f "$OUT/.built" ] && [ -x "$OUT/load_and_run" ]; then echo "real-lar: $OUT/load_and_run (built)"; exit 0; fi
    site=$(realpath "$("$PY" -c 'import site; print(site.getsitepackages()[0])')")
    echo "real-lar: building MegEngine 1.13's load_and_run into $OUT (about 5 minutes; log: $OUT/build.log)"
    rm -f "$OUT/.built"
    if bash "$SRC/build.sh" "$OUT" "$site" "$(nproc)" >"$OUT/build.log" 2>&1; then
        touch "$OUT/.built"
        echo "real-lar: built $OUT/load_and_run"
    else
        tail -n 20 "$OUT/build.log" >&2
        fail_or_skip "the build failed (log: $OUT/build.log)"
    fi ;;
*)
    echo "usage: real-lar.sh build|path" >&2; exit 2 ;;
esac
