#!/usr/bin/env bash
# The CUDA 12 runtime under the current library (driver hooks included): scripts/gpu-driver/
# cu12.c built with cc against libcudart.so.12 from the nvidia-cuda-runtime-cu12 wheel
# (CU12_WHEEL, default .whl/nvidia_cuda_runtime_cu12-*.whl, copied to the host with .gpu/), run
# under `syncspy run`; syncspy's counts per kind must equal the program's own account.
# Results in RESULTS_DIR (default ./gpu-results/cu12).
#
#   bash scripts/gpu-cu12.sh [ITERS]
set -uo pipefail
N=${1:-10}
. "$(dirname "$0")/gpu-host.sh" cu12
W=$(ls ${CU12_WHEEL:-.whl/nvidia_cuda_runtime_cu12-*.whl} 2>/dev/null | head -1)
[ -n "$W" ] || { echo "no CUDA 12 runtime wheel (CU12_WHEEL)" >&2; exit 2; }
B=$(mktemp -d); trap 'rm -rf "$B"' EXIT
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-cu12.XXXXXX)
"$PY" -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$W" "$B"
LIB=$(dirname "$(find "$B" -name 'libcudart.so.12' | head -1)")
cc -o "$B/cu12" scripts/gpu-driver/cu12.c -L"$LIB" -l:libcudart.so.12 -Wl,-rpath,"$LIB" || exit 2
"$G/syncspy" run --report "$RESULTS_DIR/cu12.json" -- "$B/cu12" "$N" >"$RESULTS_DIR/cu12.log" 2>&1
"$PY" - "$RESULTS_DIR" <<'PYEOF' | tee "$RESULTS_DIR/cu12.md"
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
own = json.loads([l for l in (R / "cu12.log").read_text().splitlines() if l.startswith("{")][-1])
rep = json.loads((R / "cu12.json").read_text())
p = max(rep["processes"], key=lambda p: p["recorded_events"])
seen = {k: v["count"] for k, v in p["kinds"].items() if k != "gpu_idle"}
ok = all(seen.get(k, 0) == v for k, v in own.items()) and set(seen) <= set(own)
print(f"| CUDA 12 runtime (libcudart.so.12) | {own} | {seen} | {'exact' if ok else 'FAIL'} |")
sys.exit(0 if ok else 1)
PYEOF
