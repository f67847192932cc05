#!/usr/bin/env bash
# The monitor on a real job. Run it on a GPU host with PyTorch, in a copy of the repository
# that holds the release artifacts in .gpu/ (scripts/gpu-stage.sh, on the development
# machine). A PyTorch training job (scenarios/python/train_mlp.py) runs under `syncspy run`
# for SECS seconds while `syncspy-top --print` takes screens of it, as plain text, at 120x40,
# 80x24 and since start. With tmux on the host, the interactive monitor is also captured, with
# a call site's stack open. Everything lands in RESULTS_DIR (default ./gpu-results/monitor):
# the screens, the job's log (its ground truth line) and syncspy's report of the same run.
# PYTHON: see gpu-host.sh.
#
#   bash scripts/gpu-monitor.sh [SECS]
set -uo pipefail
SECS=${1:-24}
. "$(dirname "$0")/gpu-host.sh" monitor
for f in syncspy syncspy-top libsyncspy.so; do
  [ -f "$G/$f" ] || { echo "missing $G/$f: run scripts/gpu-stage.sh on the development machine and copy .gpu/ here" >&2; exit 2; }
done
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-monitor.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT

"$G/syncspy" run --report "$RESULTS_DIR/train-report.json" -- \
  "$PY" scenarios/python/train_mlp.py --seconds "$SECS" >"$RESULTS_DIR/train.log" 2>&1 &
RUN=$!
# Start-up (torch import, CUDA context) can take 10 s or more: wait for the loop to start.
for _ in $(seq 1200); do
  grep -q '^training for' "$RESULTS_DIR/train.log" 2>/dev/null && break
  kill -0 "$RUN" 2>/dev/null || break
  sleep 0.1
done
sleep 5 # 5 s of the loop, so "last 10s" is about the loop
"$G/syncspy-top" --print --after 4 --size 120x40 >"$RESULTS_DIR/top-120x40.txt" 2>&1
"$G/syncspy-top" --print --after 2 --size 80x24 >"$RESULTS_DIR/top-80x24.txt" 2>&1
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
} >"$RESULTS_DIR/top-more.txt"
wait "$RUN"
echo "job exit: $?" >>"$RESULTS_DIR/train.log"
"$G/syncspy" report "$RESULTS_DIR/train-report.json" >"$RESULTS_DIR/train-summary.txt" 2>&1
