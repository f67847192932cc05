#!/usr/bin/env bash
# Containers on a GPU host (issue 23's proof), as root, with real PyTorch training loops
# (scenarios/python/train_mlp.py) in namespaces of their own, made with unshare as a
# container runtime makes them. Needs the release artifacts in .gpu/ (scripts/gpu-stage.sh).
#   0. control: the loop alone, without syncspy (its losses, step by step);
#   1. jobs A and B, each in its own PID namespace (pid 1 there), the library preloaded,
#      sharing one segment folder (a pod's view of the host's /dev/shm) with eager reclaim
#      (no linger, no folder cap): A's live segment must never shrink or vanish when B
#      starts, and a node agent (host namespace) must list both with their host pids;
#   2. job D in its own PID and mount namespaces with a private tmpfs /dev/shm, preloaded:
#      the node agent, whose own folder is another, must find and count it;
#   3. job C likewise private, but with no library at all inside (the folder holding it is
#      hidden by a tmpfs) and no preload: `syncspy attach` from the host must count its
#      `.item()` stalls at the loop's line, and its losses must equal the control's.
# Results in RESULTS_DIR (default ./gpu-results/containers): containers.md and the logs.
#
#   bash scripts/gpu-containers.sh [SECS]          (default 40)
set -uo pipefail
SECS=${1:-40}
. "$(dirname "$0")/gpu-host.sh" containers
R=$RESULTS_DIR
TRAIN=$PWD/scenarios/python/train_mlp.py
SHM=$(mktemp -d /dev/shm/syncspy-ct.XXXXXX)
AGENT_DIR=$(mktemp -d /dev/shm/syncspy-ct-agent.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$SHM" "$AGENT_DIR"
}
trap cleanup EXIT
wait_loop() { for _ in $(seq 900); do grep -q "training for" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# The job's host pid: the child of the unshare process (--fork).
child_of() { cat /proc/"$1"/task/"$1"/children 2>/dev/null | awk '{print $1}'; }
row() { echo "| $1 | $2 | $3 |" >>"$R/containers.md"; }
same_losses() { # steps both runs made, with equal losses
  "$PY" - "$1" "$2" <<'PYEOF'
import sys
a = [l.split()[1] for l in open(sys.argv[1]) if l.strip()]
b = [l.split()[1] for l in open(sys.argv[2]) if l.strip()]
n = min(len(a), len(b))
same = sum(1 for i in range(n) if a[i] == b[i])
print(f"{same} of {n} steps equal")
PYEOF
}
metric_lines() { "$PY" -c "import urllib.request,sys; print(urllib.request.urlopen('http://$1/metrics', timeout=10).read().decode())" 2>&1 | grep -E "$2"; }

echo "# Containers on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" >"$R/containers.md"
echo >>"$R/containers.md"
echo "| check | expected | found |" >>"$R/containers.md"
echo "| --- | --- | --- |" >>"$R/containers.md"

# 0. Control.
"$PY" "$TRAIN" --seconds "$SECS" --step-log "$R/steps-control.txt" >"$R/control.log" 2>&1 &
PIDS+=($!)

# The node agent: host namespaces, its own folder (not the pods').
SYNCSPY_DIR=$AGENT_DIR "$G/syncspy" agent --listen 127.0.0.1:0 --interval-ms 500 \
  --token-file "$R/agent.token" >"$R/agent.log" 2>&1 &
PIDS+=($!)
ADDR=
for _ in $(seq 100); do
  ADDR=$(grep -o 'serving http://[^/]*' "$R/agent.log" | head -1 | sed 's|serving http://||')
  [ -n "$ADDR" ] && break
  sleep 0.1
done
# A second agent on the shared folder (a node whose pods mount the host's /dev/shm).
SYNCSPY_DIR=$SHM "$G/syncspy" agent --listen 127.0.0.1:0 --interval-ms 500 \
  --token-file "$R/agent-shared.token" >"$R/agent-shared.log" 2>&1 &
PIDS+=($!)
ADDR2=
for _ in $(seq 100); do
  ADDR2=$(grep -o 'serving http://[^/]*' "$R/agent-shared.log" | head -1 | sed 's|serving http://||')
  [ -n "$ADDR2" ] && break
  sleep 0.1
done

# 1. A and B: own PID namespaces, one shared folder, eager reclaim.
job_shared() {
  env LD_PRELOAD="$G/libsyncspy.so" SYNCSPY_DIR="$SHM" SYNCSPY_LINGER_MS=0 SYNCSPY_DIR_CAP_MB=0 \
    unshare --pid --fork --mount-proc --kill-child \
    "$PY" "$TRAIN" --seconds "$SECS" --step-log "$R/steps-$1.txt" >"$R/$1.log" 2>&1 &
  PIDS+=($!)
  eval "U_$1=$!"
}
job_shared a
wait_loop "$R/a.log"
sleep 2
A=$(child_of "$U_a")
SEG_A=$(cd "$SHM" && ls | grep -E '^syncspy-[0-9]+-[0-9]+' | head -1)
BLOCKS_A=$(stat -c %b "$SHM/$SEG_A")
INO_A=$(stat -c %i "$SHM/$SEG_A")
job_shared b
wait_loop "$R/b.log"
sleep 8
B=$(child_of "$U_b")
if [ -f "$SHM/$SEG_A" ] && [ "$(stat -c %i "$SHM/$SEG_A")" = "$INO_A" ]; then
  row "A's live segment after B started (eager reclaim)" "kept, $BLOCKS_A blocks" "kept, $(stat -c %b "$SHM/$SEG_A") blocks; dead mark: $(ls -a "$SHM" | grep -c '\.dead')"
else
  row "A's live segment after B started (eager reclaim)" "kept, $BLOCKS_A blocks" "GONE: $(ls "$SHM" | tr '\n' ' ')"
fi
row "segments in the shared folder" "2 (A: $SEG_A)" "$(cd "$SHM" && ls | grep -E '^syncspy-' | tr '\n' ' ')"
metric_lines "$ADDR2" '^syncspy_process_info' >"$R/process-info-shared.txt"
row "node agent on the shared folder: process_info" "pid 1 twice, host pids $A and $B" \
  "$(sed -E 's/.*pid="([0-9]*)".*host_pid="([0-9]*)".*/pid \1 host \2/' "$R/process-info-shared.txt" | tr '\n' ';')"

# 2. D: own PID and mount namespaces, private /dev/shm, preloaded.
unshare --pid --fork --mount --propagation private --mount-proc --kill-child \
  sh -c "mount -t tmpfs -o size=64m tmpfs /dev/shm && exec env LD_PRELOAD='$G/libsyncspy.so' \
    '$PY' '$TRAIN' --seconds '$SECS' --step-log '$R/steps-d.txt'" >"$R/d.log" 2>&1 &
U_d=$!
PIDS+=($U_d)
# 3. C: private /dev/shm, no preload, and the folder holding libsyncspy.so hidden.
unshare --pid --fork --mount --propagation private --mount-proc --kill-child \
  sh -c "mount -t tmpfs -o size=64m tmpfs /dev/shm && mount -t tmpfs tmpfs '$G' && \
    exec '$PY' '$TRAIN' --seconds '$SECS' --step-log '$R/steps-c.txt'" >"$R/c.log" 2>&1 &
U_c=$!
PIDS+=($U_c)
wait_loop "$R/d.log"
wait_loop "$R/c.log"
D=$(child_of "$U_d")
C=$(child_of "$U_c")
row "job C sees no library" "none" "$(nsenter -t "$C" -m ls "$G" 2>&1 | head -3 | tr '\n' ' ')(empty = hidden)"
"$G/syncspy" attach "$C" --duration 8 --report "$R/attach-c.json" >"$R/attach-c.log" 2>&1
echo $? >"$R/attach-c.exit"
sleep 3
metric_lines "$ADDR" 'syncspy_(stall_events_total|process_info)' >"$R/agent-private.txt"
row "node agent (own folder) finds D's private /dev/shm" "stream_sync events for python3 train_mlp.py, host pid $D" \
  "$(grep -E 'stall_events_total.*stream_sync|process_info' "$R/agent-private.txt" | tr '\n' ';')"
"$PY" - "$R/attach-c.json" "$R/attach-c.exit" >"$R/attach-c.txt" <<'PYEOF'
import json, sys
code = open(sys.argv[2]).read().strip()
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"exit {code}, no report: {e}"); sys.exit()
for p in r["processes"]:
    ss = p["kinds"].get("stream_sync", {}).get("count", 0)
    top = [(s["kind"], s.get("location"), s["count"]) for s in p["sites"][:3]]
    print(f"exit {code}; pid {p['pid']} host {p.get('host_pid')}; stream_sync {ss}; top sites {top}")
PYEOF
row "attach from the host into C (no library inside, private /dev/shm)" "exit 0; .item() stalls at train_mlp.py's loop line" "$(cat "$R/attach-c.txt" | tr '\n' ' ')"

# The jobs end; their results against the control's.
for p in "${PIDS[@]:0:1}"; do wait "$p"; done
for u in "$U_a" "$U_b" "$U_c" "$U_d"; do wait "$u"; echo "$u $?" >>"$R/exits.txt"; done
for j in a b c d; do
  row "job $j's losses vs the control's" "equal" "$(same_losses "$R/steps-control.txt" "$R/steps-$j.txt")"
done
row "exit codes (unshare of A, B, C, D)" "0 0 0 0" "$(awk '{print $2}' "$R/exits.txt" | tr '\n' ' ')"
cat "$R/containers.md"
