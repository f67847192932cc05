#!/usr/bin/env bash
# Measures syncspy-top's own CPU cost while it follows a process making many stall events.
# Runs `cudacalls` on the simulated runtime (syncspy run --sim) with a given op list, runs
# syncspy-top (release) in a private tmux server for SECS seconds, and prints a table:
# events/s the process made (exact counts over its wall time, from
# its report), the monitor's CPU time and its share of one core.
#
#   cargo build --release --workspace && tui/scripts/monitor-cost.sh [SECS]
#
# TOP=path/to/another/syncspy-top measures that build instead (to compare two versions on
# the same machine, one after the other).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-10}
T=${T:-target/release} # the folder of the built binaries (.gpu on the GPU machine)
TOP=${TOP:-$T/syncspy-top}
for f in syncspy syncspy-top cudacalls libsyncspy.so libsimcudart.so; do
  [ -e "$T/$f" ] || { echo "missing $T/$f: cargo build --release --workspace" >&2; exit 2; }
done
command -v tmux >/dev/null || { echo "tmux is needed" >&2; exit 2; }
DIR=$(mktemp -d /dev/shm/syncspy-top-cost.XXXXXX)
SOCK=syncspy-top-cost-$$
cleanup() { tmux -L "$SOCK" kill-server 2>/dev/null || true; [ -n "${RUN:-}" ] && kill "$RUN" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

printf '| workload | events/s | monitor CPU s | monitor %% of one core | refresh |\n'
printf '| --- | ---: | ---: | ---: | --- |\n'
run_case() {
  local name=$1; shift
  rm -rf "$DIR"/*
  SYNCSPY_DIR=$DIR "$T/syncspy" run --sim --report "$DIR/r.json" -- "$T/cudacalls" "$@" \
    >/dev/null 2>&1 &
  RUN=$!
  sleep 1
  tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 120 -y 40 \
    "exec env SYNCSPY_DIR=$DIR TERM=xterm-256color $TOP"
  local pid; pid=$(tmux -L "$SOCK" list-panes -t top -F '#{pane_pid}')
  sleep 1 # start-up (first scan, first symbolization) is not the steady state
  local before after ev0 ev1
  before=$(ticks "$pid")
  ev0=$(date +%s.%N)
  sleep "$SECS"
  after=$(ticks "$pid")
  ev1=$(date +%s.%N)
  tmux -L "$SOCK" send-keys -t top q
  kill -INT "$RUN" 2>/dev/null || true
  wait "$RUN" 2>/dev/null || true
  RUN=
  # Events per second over the whole run, from the report's exact counts.
  local rate
  rate=$(python3 -c "
import json,sys
r=json.load(open('$DIR/r.json'))
n=sum(k['count'] for p in r['processes'] for k in p['kinds'].values())
w=max(p['wall_ns'] for p in r['processes'])/1e9
print(int(n/w))")
  local cpu; cpu=$(python3 -c "print(f'{($after-$before)/$HZ:.2f}')")
  local pct; pct=$(python3 -c "print(f'{100*($after-$before)/$HZ/($ev1-$ev0):.2f}')")
  printf '| %s | %s | %s | %s%% | 250 ms (4 Hz) |\n' "$name" "$rate" "$cpu" "$pct"
}
run_case "idle (no process)" --iters 1 sleep=$((SECS * 1000000 + 3000000))
# Eight stream syncs per ~60 us sleep: about 100k events/s.
run_case "8x sync=s1, sleep=1" --iters 100000000 sync=s1 sync=s1 sync=s1 sync=s1 sync=s1 sync=s1 sync=s1 sync=s1 sleep=1
run_case "sync + pageable copy, sleep=1" --iters 100000000 sync=s1 async=d2h:64:pageable:s1 sync=s1 async=d2h:64:pageable:s1 sleep=1
# As fast as the process can: the monitor reads at most a ring (65536 records) per refresh,
# the rest are counted lost, so this is the monitor's ceiling.
run_case "sync=s1 loop (millions/s)" --iters 100000000 sync=s1
