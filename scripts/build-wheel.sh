#!/usr/bin/env bash
# Builds the syncspy wheel (dist/syncspy-<version>-py3-none-manylinux_2_<n>_x86_64.whl):
# syncspy, syncspy-top, libsyncspy.so and libsimcudart.so (the simulated runtime of --sim) in
# the Python package `syncspy` (syncspy finds the libraries next to itself), `import syncspy`,
# and the pytest plugin. Offline: no build backend, only cargo and python3. `pip install .`
# builds the same wheel through pyproject.toml (hatchling, python/hatch_build.py).
#
#   scripts/build-wheel.sh                  # cargo build --release, then the wheel
#   scripts/build-wheel.sh --debug          # from target/debug as built (CI: no second build)
#   scripts/build-wheel.sh --no-build DIR   # from binaries already in DIR
#
# Then: pip install dist/syncspy-*.whl (no network needed).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
case "${1:-}" in
  --debug)
    cargo build --locked -p syncspy-interpose -p syncspy-cli -p syncspy-tui -p simcuda
    bin="$target/debug"
    ;;
  --no-build)
    bin=${2:?"--no-build DIR"}
    ;;
  "")
    cargo build --release --locked -p syncspy-interpose -p syncspy-cli -p syncspy-tui -p simcuda
    bin="$target/release"
    ;;
  *)
    echo "usage: $0 [--debug | --no-build DIR]" >&2
    exit 2
    ;;
esac
# Debug information is left out of the copies (a debug build's is most of its 200 MB); the
# symbol tables stay.
strip=
command -v objcopy >/dev/null && strip=--strip
python3 python/build_wheel.py --bin-dir "$bin" --out "${WHEEL_OUT:-dist}" $strip
