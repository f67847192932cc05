#!/usr/bin/env bash
# Real-GPU validation of the scenario suite (about 2 minutes). Run it on a GPU host with CUDA
# 13, nvcc and PyTorch, in a copy of the repository that holds the release artifacts in .gpu/
# (SKIP_BENCH=1 PACK=1 scripts/gpu-stage.sh, on the development machine). Writes to
# RESULTS_DIR (default ./gpu-results/scenarios): log.txt, native.md (scn-* against
# scenarios/manifest.toml), traced.md (the same with GPU activity traced: the gpu_idle
# rules), python.md (the PyTorch scenarios), sim.md (the same suite on the simulator, on the
# same machine), gemm.md, runs.tgz (every report, truth line and stderr).
# PYTHON and CUDA_HOME: see gpu-host.sh.
#
#   bash scripts/gpu-scenarios.sh
set -u
. "$(dirname "$0")/gpu-host.sh" scenarios
gpu_cuda_env
export PYTHONUNBUFFERED=1
R=$RESULTS_DIR/runs
mkdir -p "$R/native" "$R/python" "$R/sim"
export SYNCSPY_DIR=/dev/shm
exec > >(tee "$RESULTS_DIR/log.txt") 2>&1
log() { echo; echo "=== $* ($(date +%T))"; }

log device
git rev-parse --short HEAD 2>/dev/null
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
nvcc --version | tail -2; "$PY" -c 'import torch; print("torch", torch.__version__)'

log "kernels: nvcc -ptx of the source vs the checked-in PTX (NVRTC 13.0.88), code lines only"
kernels/build-ptx.sh "$R/nvcc.ptx" \
  && diff <(grep -v '^//' kernels/syncspy_kernels.ptx) <(grep -v '^//' "$R/nvcc.ptx") > "$R/ptx.diff"
echo "differing lines: $(wc -l < "$R/ptx.diff")"; head -20 "$R/ptx.diff"

log "launch path without syncspy: cudaLibraryLoadData + cudaLibraryGetKernel + cudaLaunchKernel(cudaKernel_t); results checked"
for a in "sync-small-gemm --size 256 --iters 3 --check" "sync-big-gemm --size 1000 --iters 2 --check --async" \
         "item-in-loop --iters 3" "nonzero-dynamic-shape --iters 3" "pinned-double-buffer --iters 4" "pageable-h2d --iters 3"; do
  set -- $a
  timeout 60 "$G/scn-$1" "${@:2}" > "$R/direct-$1.truth" 2> "$R/direct-$1.err"
  echo "scn-$a: exit $? $(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("ok", d["ok"], d["checks"], {k: round(v, 3) for k, v in d["gpu_ms"].items()})' "$R/direct-$1.truth" 2>&1 | tail -1)"
done

log "scenario suite under syncspy, real runtime, against scenarios/manifest.toml"
timeout 100 "$G/scenario-check" --out "$R/native" > "$RESULTS_DIR/native.md"; echo "exit $?"

log "the same suite with GPU activity traced throughout: the manifest's gpu_idle rules"
mkdir -p "$R/traced"
timeout 100 "$G/scenario-check" --trace-gpu --out "$R/traced" > "$RESULTS_DIR/traced.md"; echo "exit $?"
grep -E "GPU idle|share of the GPU|gap cause|MISMATCH" "$RESULTS_DIR/traced.md" | head -40
cat "$RESULTS_DIR/native.md"

log "GEMM: sync cost per step, small vs big (from the truth lines)"
python3 - "$R/native" > "$RESULTS_DIR/gemm.md" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
print("| run | n | iters | wall us/step | GPU us/step | wall - GPU us/step | sync share of step | TFLOP/s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for rid in ["sync-small-gemm", "sync-small-gemm-async", "sync-big-gemm", "sync-big-gemm-async"]:
    try:
        t = json.loads([l for l in (d / f"{rid}.truth").read_text().splitlines() if l.startswith('{"')][-1])
    except Exception as e:
        print(f"| {rid} | missing: {e} |"); continue
    s, n = t["per_step_us"], t["args"]["size"]
    tflops = 2 * n**3 / (s["gpu"] * 1e-6) / 1e12
    print(f"| {rid} | {n} | {t['args']['iters']} | {s['wall']:.1f} | {s['gpu']:.1f} | {s['overhead']:.1f} | {100 * s['overhead'] / s['wall']:.1f}% | {tflops:.2f} |")
PY
cat "$RESULTS_DIR/gemm.md"

log "PyTorch scenarios under syncspy (each at 5 and 25 iterations)"
timeout 200 "$G/scenario-check" --python-only --python-bin "$PY" --python-iters 5,25 --out "$R/python" > "$RESULTS_DIR/python.md"
rc=$?; echo "exit $rc"
# Cut off: check what was saved.
[ $rc = 124 ] && "$G/scenario-check" --python-only --python-iters 5,25 --saved "$R/python" > "$RESULTS_DIR/python.md"
cat "$RESULTS_DIR/python.md"

log "the same suite on the simulator, same machine (for the simulator's calibration)"
timeout 40 "$G/scenario-check" --sim --out "$R/sim" > "$RESULTS_DIR/sim.md"; echo "exit $?"
head -16 "$RESULTS_DIR/sim.md"

log done
cd "$RESULTS_DIR" && tar czf runs.tgz runs && rm -rf runs
