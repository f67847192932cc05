#!/usr/bin/env bash
# CI check of the Python side (called by .ci/run after the test command): packages the debug
# artifacts already built into a wheel, installs it into a fresh venv (pip, no network for
# the wheel itself), and on the simulated runtime (target/debug/libsimcudart.so, found as
# libcudart.so.13 through a folder of links, as `syncspy run --sim` does):
# - `import syncspy` before a ctypes program, no LD_PRELOAD: stalls named by line
#   (python/tests/import_first.py);
# - the runtime loaded first: a warning pointing at syncspy run / attach (too_late.py);
# - the pytest plugin on a small suite, alone and with pytest-xdist (check_pytest.py;
#   pytest and pytest-xdist come from PyPI);
# - the wheel's `syncspy` command finds the wheel's libsyncspy.so and libsimcudart.so
#   (syncspy run --sim);
# - the simulator examples of the README and docs/guide/python.md, run as written with the
#   wheel's commands on PATH (python/tests/doc_examples.py);
# - `pip install .` from the checkout (pyproject.toml: hatchling, python/hatch_build.py) into
#   another fresh venv, from the same build (SYNCSPY_WHEEL_PROFILE=debug in CI: cargo has
#   nothing left to build): the same files and entry points as the script's wheel, and its
#   `syncspy` command and `import syncspy` work. pip fetches hatchling from PyPI.
# Usage: scripts/wheel-check.sh [TARGET_DIR/debug]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$(realpath "${1:-${CARGO_TARGET_DIR:-target}/debug}")
work=$(mktemp -d "${TMPDIR:-/tmp}/syncspy-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

WHEEL_OUT="$work/dist" scripts/build-wheel.sh --no-build "$bin" >"$work/wheel.txt"
wheel=$(tail -n1 "$work/wheel.txt")
echo "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"

python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q --no-index "$wheel"
"$py" -m pip install -q pytest pytest-xdist

# The simulated runtime under the names programs look for, and a ctypes library linked
# against it (as libtorch is against libcudart).
sim="$work/sim"
mkdir -p "$sim"
for n in libcudart.so.13 libcudart.so libcuda.so.1 libcupti.so.13; do
  ln -s "$bin/libsimcudart.so" "$sim/$n"
done
"${CC:-cc}" -shared -fPIC -O1 -pthread -o "$sim/libpycaller.so" \
  interpose/tests/python/pycaller.c -L"$sim" -l:libcudart.so.13 -Wl,-rpath,"$sim"
export PYCALLER="$sim/libpycaller.so"
export LD_LIBRARY_PATH="$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SYNCSPY_DIR="$work/shm" SIMCUDA_TIME_SCALE=1
mkdir -p "$SYNCSPY_DIR"
unset LD_PRELOAD SYNCSPY_LIB SYNCSPY_SIM_LIB

# Installed where they find each other: the command, the library next to its binary.
"$work/venv/bin/syncspy" --version
cli=$("$py" -c 'import os, syncspy; assert os.path.isfile(syncspy.library_path()); print(syncspy.cli_path())')
[[ "$cli" == */site-packages/syncspy/bin/syncspy ]] || { echo "syncspy.cli_path(): $cli" >&2; exit 1; }
SYNCSPY_IMPORT=0 "$work/venv/bin/syncspy" run --sim \
  -- "$py" -c 'import ctypes, os; ctypes.CDLL(os.environ["PYCALLER"]).pc_sync()' \
  2>"$work/run.txt"
grep -q "cudaStreamSynchronize" "$work/run.txt" || { cat "$work/run.txt"; exit 1; }

PATH="$work/venv/bin:$PATH" "$py" "$root/python/tests/doc_examples.py" "$root" "$work"

# pip install . into a fresh venv: what a user runs in a checkout.
python3 -m venv "$work/venv-pip"
pip_py="$work/venv-pip/bin/python"
# The profile and target folder of the binaries checked above: cargo finds them built.
CARGO_TARGET_DIR=$(dirname "$bin") SYNCSPY_WHEEL_PROFILE=$(basename "$bin") \
  "$pip_py" -m pip install -q "$root"
"$work/venv-pip/bin/syncspy" --version
SYNCSPY_IMPORT=0 "$work/venv-pip/bin/syncspy" run --sim \
  -- "$pip_py" -c 'import ctypes, os; ctypes.CDLL(os.environ["PYCALLER"]).pc_sync()' \
  2>"$work/run-pip.txt"
grep -q "cudaStreamSynchronize" "$work/run-pip.txt" || { cat "$work/run-pip.txt"; exit 1; }
"$pip_py" - "$wheel" <<'EOF'
# The same wheel both ways: package files and entry points.
import configparser, glob, os, sys, zipfile
import syncspy

assert os.path.isfile(syncspy.library_path()), syncspy.library_path()
z = zipfile.ZipFile(sys.argv[1])
script = {n for n in z.namelist() if ".dist-info/" not in n}
site = os.path.dirname(os.path.dirname(syncspy.__file__))
info = glob.glob(os.path.join(site, "syncspy-*.dist-info"))[0]
record = [l.split(",")[0] for l in open(os.path.join(info, "RECORD"))]
pip = {n for n in record if n and not n.startswith("..") and ".dist-info/" not in n
       and "__pycache__" not in n}
assert pip == script, "pip install . and scripts/build-wheel.sh differ: %s" % (pip ^ script)

def entries(text):
    c = configparser.ConfigParser()
    c.read_string(text)
    return {s: dict(c[s]) for s in c.sections()}

ep_script = entries(z.read([n for n in z.namelist() if n.endswith("/entry_points.txt")][0]).decode())
ep_pip = entries(open(os.path.join(info, "entry_points.txt")).read())
assert ep_pip == ep_script, (ep_pip, ep_script)
print("pip install .: the same %d files and entry points as the script's wheel" % len(pip))
EOF

cd "$work"
"$py" "$root/python/tests/import_first.py" "$PYCALLER"
"$py" "$root/python/tests/too_late.py" "$PYCALLER"
"$py" "$root/python/tests/check_pytest.py" "$work"
"$py" "$root/python/tests/check_pytest.py" "$work" -n 2
echo "wheel-check: ok"
