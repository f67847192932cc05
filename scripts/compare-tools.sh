#!/usr/bin/env bash
# syncspy side by side with torch.profiler and torch.cuda.set_sync_debug_mode, in one
# interleaved run on a GPU host with PyTorch (and JAX, for the JAX row), in a copy of the
# repository that holds the release artifacts in .gpu/ (scripts/gpu-stage.sh). Results in
# RESULTS_DIR (default ./gpu-results/compare): compare.md (the tables of docs/performance.md)
# and runs.json (every run). PYTHON: see gpu-host.sh.
#
#   bash scripts/compare-tools.sh [ROUNDS] [--quick]
set -uo pipefail
ROUNDS=${1:-3}
shift || true
. "$(dirname "$0")/gpu-host.sh" compare
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-compare.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
"$PY" scripts/compare_tools.py "$RESULTS_DIR" --rounds "$ROUNDS" --syncspy "$G/syncspy" --python "$PY" "$@"
