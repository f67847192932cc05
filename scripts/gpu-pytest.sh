#!/usr/bin/env bash
# The pip way on a GPU host (issue 27's proof): the wheel (built on the development machine
# with scripts/build-wheel.sh and brought in .whl/, with the pytest wheels when the host has
# no pytest) installed into a fresh venv that sees the host's PyTorch, then the PyTorch tests
# of scripts/gpu-pytest/ run three ways: `pytest --syncspy` (the plugin), with xdist
# (`-n 2`), and under torch.cuda.set_sync_debug_mode("error") without syncspy. Results in
# RESULTS_DIR (default ./gpu-results/pytest): the three pytest outputs and pytest.md.
#
#   bash scripts/gpu-pytest.sh
set -uo pipefail
RESULTS_DIR=${RESULTS_DIR:-gpu-results/pytest}
mkdir -p "$RESULTS_DIR" && RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
cd "$(dirname "$0")/.." || exit 2
R=$RESULTS_DIR
PY=${PYTHON:-python3}
V=$(mktemp -d /tmp/syncspy-venv.XXXXXX)
trap 'rm -rf "$V"' EXIT
"$PY" -m venv "$V" || exit 2
# The host's PyTorch may live in a venv of its own, whose packages a new venv does not see
# (--system-site-packages gives the base interpreter's): a .pth file adds them.
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' \
  >"$("$V/bin/python" -c 'import site; print(site.getsitepackages()[0])')/host-packages.pth"
"$V/bin/python" -m pip install -q --no-index --find-links .whl syncspy >"$R/install.txt" 2>&1
"$V/bin/python" -c 'import pytest' 2>/dev/null ||
  "$V/bin/python" -m pip install -q --no-index --find-links .whl pytest pytest-xdist >>"$R/install.txt" 2>&1
"$V/bin/python" -m pip list 2>/dev/null | grep -Ei '^(syncspy|pytest|torch) ' >>"$R/install.txt"
cd scripts/gpu-pytest || exit 2
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-pytest.XXXXXX)
"$V/bin/python" -m pytest -q -rA -p no:cacheprovider --syncspy test_model.py >"$R/plugin.txt" 2>&1
echo "exit $?" >>"$R/plugin.txt"
"$V/bin/python" -m pytest -q -rA -p no:cacheprovider --syncspy -n 2 test_model.py >"$R/xdist.txt" 2>&1
echo "exit $?" >>"$R/xdist.txt"
SYNC_DEBUG=1 "$V/bin/python" -m pytest -q -rA -p no:cacheprovider -p no:syncspy test_model.py \
  >"$R/sync-debug.txt" 2>&1
echo "exit $?" >>"$R/sync-debug.txt"
rm -rf "$SYNCSPY_DIR"
{
  echo "| way | test_sync_free | test_syncs | test_synchronize_and_event | lines named |"
  echo "| --- | --- | --- | --- | --- |"
  for w in plugin xdist sync-debug; do
    f="$R/$w.txt"
    st() { grep -q "^PASSED test_model.py::$1" "$f" && echo pass || { grep -q "^FAILED test_model.py::$1" "$f" && echo FAIL || echo "?"; }; }
    lines=$(grep -oE 'test_model\.py:[0-9]+[^|]*x[0-9]+' "$f" | sort -u | tr '\n' ';')
    echo "| $w | $(st test_sync_free) | $(st test_syncs) | $(st test_synchronize_and_event) | ${lines:-none} |"
  done
} >"$R/pytest.md"
cat "$R/pytest.md"
