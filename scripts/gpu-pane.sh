#!/usr/bin/env bash
# The monitor's GPU pane on a real GPU (issue 11). Run it on a GPU host with PyTorch, in a copy
# of the repository that holds the release artifacts in .gpu/ (scripts/gpu-stage.sh). A job
# with known GPU idle gaps (scenarios/python/gpu_gaps.py: GPU work, torch.cuda.synchronize(),
# then SLEEP ms on the host, repeated) runs under `syncspy run` with SYNCSPY_GPU_IDLE=off, so
# only the pane's request traces it; once it trains, `syncspy-top --print --gpu --pid PID`
# follows it for AFTER seconds and prints its screen. The pane must say the GPU is traced on
# request, show device 0 busy with seconds drawn, gaps whose median is the job's own (the
# expected gaps it prints at exit), blamed on device_sync at gpu_gaps.py's marked line.
# Results in RESULTS_DIR (default ./gpu-results/pane): screen.txt, job.log, pane.md.
# PYTHON: see gpu-host.sh.
#
#   bash scripts/gpu-pane.sh [ITERS] [SLEEP_MS] [AFTER]      (defaults 4000 2 6)
set -uo pipefail
ITERS=${1:-4000}
SLEEP=${2:-2}
AFTER=${3:-6}
. "$(dirname "$0")/gpu-host.sh" pane
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-pane.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
R=$RESULTS_DIR
export PYTHONUNBUFFERED=1
SYNCSPY_GPU_IDLE=off "$G/syncspy" run --report "$R/report.json" -- \
  "$PY" scenarios/python/gpu_gaps.py --iters "$ITERS" --sleep-ms "$SLEEP" >"$R/job.log" 2>&1 &
RUN=$!
# The job's segment appears at its first CUDA call; give its start-up two seconds more.
for _ in $(seq 300); do ls "$SYNCSPY_DIR"/syncspy-* >/dev/null 2>&1 && break; sleep 0.1; done
sleep 2
PID=$(pgrep -f "gpu_gaps.py --iters $ITERS" | grep -v "^$RUN$" | head -1)
"$G/syncspy-top" --print --gpu --pid "$PID" --after "$AFTER" --size 130x45 >"$R/screen.txt" 2>"$R/top.err"
echo "syncspy-top exit $?" >>"$R/top.err"
wait "$RUN"
echo "job exit $?" >>"$R/job.log"
"$PY" - "$R" <<'PYEOF' | tee "$R/pane.md"
import json, pathlib, re, statistics, sys
r = pathlib.Path(sys.argv[1])
screen = (r / "screen.txt").read_text()
truth = [json.loads(l) for l in (r / "job.log").read_text().splitlines() if l.startswith('{"scenario"')]
want = statistics.median(truth[-1]["expected_gap_ns"]) / 1e6 if truth else float("nan")
print("```"); print(screen.rstrip()); print("```")
def line(needle):
    return next((l for l in screen.splitlines() if needle in l), "")
ok = True
def check(what, cond, found):
    global ok
    ok &= bool(cond)
    print(f"- {what}: {'ok' if cond else 'FAIL'} ({found.strip()[:110]})")
title = line("GPU pid")
check("traced on the pane's request, the process's own mode off", "mode off" in title and "[traced on request" in title, title)
dev = line("device 0")
check("device 0 busy share and seconds drawn", "busy      -" not in dev and any(c not in " |│" for c in (dev.split("│")[2:3] or [""])[0]), dev)
gaps = line("idle gaps >=")
m = re.search(r"p50 ([\d.]+) (ms|µs|us)", gaps)
p50 = float(m.group(1)) / (1000 if m and m.group(2) != "ms" else 1) if m else float("nan")
check(f"gap median {p50:.2f} ms vs the job's own {want:.2f} ms (within 10%)", abs(p50 - want) <= 0.1 * want, gaps)
cause = line("cudaDeviceSynchronize")
check("top cause device_sync at gpu_gaps.py", cause.lstrip("│ ").startswith(tuple("0123456789")) and "gpu_gaps.py" in cause, cause)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PYEOF
