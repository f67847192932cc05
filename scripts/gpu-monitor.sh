#!/usr/bin/env bash
# On the GPU machine (after scripts/gpu-stage.sh here and unpacking .gpu there): a PyTorch
# training job (scenarios/python/train_mlp.py) runs under `syncspy run` for SECS seconds while
# `syncspy-top --print` takes screens of it, as plain text, at 120x40, 80x24 and since start.
# With tmux there, the interactive monitor is also captured, with a call site's stack open.
# Everything lands in $OUT (or ./gpu-monitor-out): the screens, the job's log (its ground
# truth line) and syncspy's report of the same run.
#
#   bash scripts/gpu-monitor.sh [SECS]
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-24}
OUT=${OUT:-gpu-monitor-out}
mkdir -p "$OUT"
G=.gpu
PY=${PYTHON:-python3}
for f in syncspy syncspy-top libsyncspy.so; do
  [ -x "$G/$f" ] || [ -f "$G/$f" ] || { echo "missing $G/$f: run scripts/gpu-stage.sh here, carry .gpu" >&2; exit 2; }
done
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-monitor.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT

"$G/syncspy" run --report "$OUT/train-report.json" -- \
  "$PY" scenarios/python/train_mlp.py --seconds "$SECS" >"$OUT/train.log" 2>&1 &
RUN=$!
# Start-up (torch import, CUDA context) can take 10 s or more: wait for the loop to start.
for _ in $(seq 1200); do
  grep -q '^training for' "$OUT/train.log" 2>/dev/null && break
  kill -0 "$RUN" 2>/dev/null || break
  sleep 0.1
done
sleep 5 # 5 s of the loop, so "last 10s" is about the loop
"$G/syncspy-top" --print --after 4 --size 120x40 >"$OUT/top-120x40.txt" 2>&1
"$G/syncspy-top" --print --after 2 --size 80x24 >"$OUT/top-80x24.txt" 2>&1
{
  echo "== --all, 120x40"
  "$G/syncspy-top" --print --after 1 --all --size 120x40 2>&1
  if command -v tmux >/dev/null; then
    S=syncspy-monitor-$$
    tmux -L "$S" -f /dev/null new-session -d -s top -x 120 -y 40 \
      "exec env SYNCSPY_DIR=$SYNCSPY_DIR TERM=xterm-256color $G/syncspy-top"
    sleep 4
    echo "== interactive (tmux), 120x40"
    tmux -L "$S" capture-pane -p -t top
    # Tab to the call sites pane, open the top site's stack.
    tmux -L "$S" send-keys -t top Tab; sleep 0.3
    tmux -L "$S" send-keys -t top Tab; sleep 0.3
    tmux -L "$S" send-keys -t top Enter; sleep 1.5
    echo "== interactive (tmux), Tab Tab Enter: the top site's stack"
    tmux -L "$S" capture-pane -p -t top
    tmux -L "$S" send-keys -t top q
    sleep 0.5
    tmux -L "$S" kill-server 2>/dev/null
  else
    echo "== no tmux on this machine: no interactive capture"
  fi
} >"$OUT/top-more.txt"
wait "$RUN"
echo "job exit: $?" >>"$OUT/train.log"
"$G/syncspy" report "$OUT/train-report.json" >"$OUT/train-summary.txt" 2>&1
