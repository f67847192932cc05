#!/usr/bin/env bash
# GPU tracing on a reader's request, on a real GPU (issue 11). Run it on a GPU host with
# PyTorch, in a copy of the repository that holds the release artifacts in .gpu/
# (scripts/gpu-stage.sh). A training job (scenarios/python/train_mlp.py) runs for SECS seconds
# under `syncspy run` with SYNCSPY_GPU_IDLE=off, next to `syncspy agent`; AT seconds after its
# start-up is over, `POST /api/v1/gpu-trace?pid=...&seconds=FOR` asks the job's library to
# trace its GPU for FOR seconds. The report must show the GPU measured, traced for about FOR
# seconds (not the whole run), with gaps; and the agent's answer. Results in RESULTS_DIR (default
# ./gpu-results/trace-request): report.json, agent.log, answer.txt, trace-request.md.
# PYTHON: see gpu-host.sh.
#
#   bash scripts/gpu-trace-request.sh [SECS] [AT] [FOR]      (defaults 14 5 4)
set -uo pipefail
SECS=${1:-14}
AT=${2:-5}
FOR=${3:-4}
. "$(dirname "$0")/gpu-host.sh" trace-request
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-request.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"; kill "$AGENT" 2>/dev/null' EXIT
R=$RESULTS_DIR
PORT=${PORT:-19599}
"$G/syncspy" agent --listen "127.0.0.1:$PORT" --token-file "$R/agent.token" --interval-ms 250 \
  >"$R/agent.log" 2>&1 &
AGENT=$!
SYNCSPY_GPU_IDLE=off "$G/syncspy" run --report "$R/report.json" -- \
  "$PY" scenarios/python/train_mlp.py --seconds "$SECS" >"$R/job.log" 2>&1 &
RUN=$!
# Ask once the job trains (it says so when its start-up is over: a window during torch's CUDA
# initialisation has no kernel to record), AT seconds later.
for _ in $(seq 600); do grep -q "training for" "$R/job.log" 2>/dev/null && break; sleep 0.1; done
sleep "$AT"
PID=$(pgrep -f "train_mlp.py --seconds $SECS" | grep -v "^$RUN$" | head -1)
# Ask until the agent follows the job (404 before), for at most 20 s.
for _ in $(seq 40); do
  code=$(curl -s -o "$R/answer.txt" -w '%{http_code}' -X POST \
    -H "Authorization: Bearer $(cat "$R/agent.token")" \
    "http://127.0.0.1:$PORT/api/v1/gpu-trace?pid=$PID&seconds=$FOR")
  [ "$code" != 404 ] && break
  sleep 0.5
done
date +%s.%N >"$R/asked-at.txt"
wait "$RUN"
echo "job exit $?" >>"$R/answer.txt"
"$PY" - "$R" "$FOR" <<'PYEOF' | tee "$R/trace-request.md"
import json, sys, pathlib
r, want = pathlib.Path(sys.argv[1]), float(sys.argv[2])
rep = json.loads((r / "report.json").read_text())
p = max(rep["processes"], key=lambda p: p["wall_ns"])
g = p["gpu"]
traced = g.get("traced_ns", 0) / 1e9
print(f"agent answered: {(r / 'answer.txt').read_text().strip()}")
print(f"job wall {p['wall_ns'] / 1e9:.1f} s; GPU mode {g.get('mode')}, state at the end {g.get('state')}, "
      f"measured {g.get('measured')}, traced {traced:.2f} s (asked {want:g} s), busy {g.get('busy_fraction')}, "
      f"gaps {g['idle']['count']} ({g['idle']['total_ns'] / 1e6:.1f} ms)")
ok = g.get("measured") and g.get("mode") == "off" and 0.5 * want <= traced <= want + 1.5
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PYEOF
