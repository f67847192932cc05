#!/usr/bin/env bash
# The driver API on a GPU host (issue 15): programs that reach the GPU through libcuda.so.1,
# each checked against its own account (scripts/gpu-driver/check.py). Run it in a copy of the
# repository holding the release artifacts in .gpu/ (scripts/gpu-stage.sh). Needs nvcc
# (CUDA_HOME), and PYTHON with torch, triton, jax and cupy. Results in RESULTS_DIR (default
# ./gpu-results/driver): per program its report, trace and output, driver.md (the table) and
# cost.md.
#
#   bash scripts/gpu-driver.sh [ITERS] [ROUNDS]
#
# - a C program linked with libcudart_static.a (nvcc's default), and the same built with
#   -cudart shared: the same exact counts;
# - the simulator-free drivercalls in its three modes, against the real driver;
# - a JAX loop (block_until_ready, jax.device_get): recorded, whatever is seen, with threads;
# - a CuPy loop (float(x.sum())), a Triton kernel launched directly with a sync after it, a
#   torch.compile loop with .item(): the waits at the loop's lines must be the program's own;
# - torch.compile again with SYNCSPY_DRIVER=0 (runtime hooks alone): the same counts;
# - the cost on the launch-heavy MLP loop, driver hooks on and off, interleaved.
set -uo pipefail
ITERS=${1:-50}
ROUNDS=${2:-3}
. "$(dirname "$0")/gpu-host.sh" driver
gpu_cuda_env
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-driver.XXXXXX)
B=$(mktemp -d); trap 'rm -rf "$SYNCSPY_DIR" "$B"' EXIT
D=scripts/gpu-driver

run() { # NAME CMD...: syncspy run with report, trace and output in RESULTS_DIR
  local name=$1; shift
  "$G/syncspy" run --report "$RESULTS_DIR/$name.json" --trace "$RESULTS_DIR/$name.trace.json" \
    -- "$@" >"$RESULTS_DIR/$name.log" 2>&1 || echo "$name: exit $?" >>"$RESULTS_DIR/errors.txt"
}

nvcc -o "$B/c-static" "$D/static_rt.cu" && run c-static "$B/c-static"
nvcc -cudart shared -o "$B/c-shared" "$D/static_rt.cu" && run c-shared "$B/c-shared"
for m in procaddr static dlsym; do run "drivercalls-$m" "$G/drivercalls" "$m" 3; done
run jax "$PY" "$D/jax_loop.py" "$ITERS"
run cupy "$PY" "$D/cupy_loop.py" "$ITERS"
run triton "$PY" "$D/triton_direct.py" "$ITERS"
run compile "$PY" "$D/compile_item.py" "$ITERS"
SYNCSPY_DRIVER=0 run compile-runtime-only "$PY" "$D/compile_item.py" "$ITERS"

# drivercalls on the real driver: its own account line is the second JSON line.
for m in procaddr static dlsym; do
  "$PY" - "$RESULTS_DIR" "$m" <<'PYEOF' >>"$RESULTS_DIR/drivercalls.md"
import json, pathlib, sys
res, m = pathlib.Path(sys.argv[1]), sys.argv[2]
log = [l for l in (res / f"drivercalls-{m}.log").read_text().splitlines() if l.startswith('{"kinds"')]
rep = json.loads((res / f"drivercalls-{m}.json").read_text())
got = {}
for p in rep["processes"]:
    for k, v in p["kinds"].items():
        got[k] = got.get(k, 0) + v["count"]
want = json.loads(log[-1])["kinds"] if log else {}
print(f"| drivercalls {m} | {want} | {got} | {'exact' if want == got else 'FAIL'} |")
PYEOF
done

# Cost on the launch-heavy loop: SYNCSPY_DRIVER=1 (default) and 0, interleaved.
for r in $(seq "$ROUNDS"); do
  for drv in 1 0; do
    SYNCSPY_DRIVER=$drv "$G/syncspy" run --report "$RESULTS_DIR/cost-$drv-$r.json" -- \
      "$PY" scenarios/python/train_mlp.py --seconds 10 >"$RESULTS_DIR/cost-$drv-$r.log" 2>&1
  done
done
"$PY" - "$RESULTS_DIR" "$ROUNDS" <<'PYEOF' >"$RESULTS_DIR/cost.md"
import json, pathlib, statistics, sys
res, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def steps(drv, r):
    t = [l for l in (res / f"cost-{drv}-{r}.log").read_text().splitlines() if l.startswith("{")]
    if not t:
        return float("nan")
    j = json.loads(t[-1])
    n = j.get("ops", {}).get("steps") or 1
    return j["wall_ms"]["loop"] / n
print("| SYNCSPY_DRIVER | ms per training step of train_mlp.py (median, min-max) |")
print("| --- | --- |")
for drv in (1, 0):
    v = [steps(drv, r) for r in range(1, rounds + 1)]
    print(f"| {drv} | {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}) |")
PYEOF
"$PY" "$D/check.py" "$RESULTS_DIR"
status=$?
cat "$RESULTS_DIR/drivercalls.md"
grep -q FAIL "$RESULTS_DIR/drivercalls.md" && status=1
exit $status
