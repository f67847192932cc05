#!/usr/bin/env bash
# Measures `syncspy agent`'s own CPU cost while it follows N instrumented processes, each
# making about RATE stall events per second (cudacalls on the simulated runtime, preloaded by
# hand as on a production node). Prints one table row.
#
#   cargo build --release --workspace && scripts/agent-cost.sh [N] [SECS]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-8}
SECS=${2:-10}
T=target/release
DIR=$(mktemp -d /dev/shm/syncspy-agent-cost.XXXXXX)
SIM=$(mktemp -d)
ln -s "$PWD/$T/libsimcudart.so" "$SIM/libcudart.so.13"
PORT=$((20000 + RANDOM % 20000))
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR" "$SIM"; }
trap cleanup EXIT
for _ in $(seq "$N"); do
  # One stream sync every ~100 us: about 10k events/s per process.
  SYNCSPY_DIR=$DIR LD_PRELOAD=$PWD/$T/libsyncspy.so LD_LIBRARY_PATH=$SIM \
    "$T/cudacalls" --iters 100000000 sync=s1 sleep=40 >/dev/null &
  pids+=($!)
done
SYNCSPY_DIR=$DIR "$T/syncspy" agent --listen "127.0.0.1:$PORT" --token-file "$DIR/.token" >/dev/null 2>&1 &
agent=$!
pids+=("$agent")
sleep 3
events() {
  python3 - "$PORT" "$DIR/.token" <<'PY'
import json, sys, urllib.request
token = open(sys.argv[2]).read().strip()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/api/v1/snapshot",
                             headers={"Authorization": f"Bearer {token}"})
s = json.load(urllib.request.urlopen(req))
procs = s.get("processes", s.get("report", {}).get("processes", []))
print(sum(k["count"] for p in procs for k in p["kinds"].values()), len(procs))
PY
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
read -r e0 n0 < <(events)
t0=$(ticks "$agent")
sleep "$SECS"
t1=$(ticks "$agent")
read -r e1 n1 < <(events)
HZ=$(getconf CLK_TCK)
python3 - "$N" "$n1" "$e0" "$e1" "$t0" "$t1" "$HZ" "$SECS" <<'PY'
import sys
n, seen, e0, e1, t0, t1, hz, secs = map(float, sys.argv[1:])
rate = (e1 - e0) / secs
cpu = (t1 - t0) / hz
print("| processes | followed | events/s (all) | events/s per process | agent CPU s | agent % of one core |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
print(f"| {n:.0f} | {seen:.0f} | {rate:,.0f} | {rate / n:,.0f} | {cpu:.2f} | {100 * cpu / secs:.2f}% |")
PY
