#!/usr/bin/env bash
# Soak of a shared GPU server (issue 25, items 6 and 7): while root's jobs run, another local
# user (nobody) floods the segment folder for SECS seconds with
#   - one valid segment of 65,536 long module paths and 2,048 call sites of 62 frames
#     (hostile-writer wide),
#   - SHORT short-lived processes in all (hostile-writer tiny: each a tiny valid segment that
#     records a few events and ends; in-process, with made-up pids, not real processes),
#   - LIVE tiny segments that stay live (hostile-writer live),
# and 1,000 idle connections are held open to the agent. `syncspy agent` (root) and
# `syncspy-top` (root, in tmux) follow the folder. Every JOB_EVERY seconds root runs a short
# job (cudacalls on the simulated runtime, 5 waits) and the script times how long it takes to
# appear in /metrics. Every 10 s it samples both readers' memory and CPU, times /metrics and
# reads what the agent dropped; it prints a table and a summary, and fails when a reader died,
# /metrics did not answer in 5 s, a root job was not counted within 30 s, or a reader's memory
# went over its bound (AGENT_MB, MONITOR_MB).
#
#   cargo build --release --workspace && sudo scripts/soak-shared.sh [SECS] [SHORT] [LIVE]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-600}
SHORT=${2:-30000}
LIVE=${3:-1500}
JOB_EVERY=${JOB_EVERY:-15}
AGENT_MB=${AGENT_MB:-1536}
MONITOR_MB=${MONITOR_MB:-1536}
T=${T:-target/release}
for f in syncspy syncspy-top hostile-writer cudacalls libsyncspy.so libsimcudart.so; do
  [ -e "$T/$f" ] || { echo "missing $T/$f: cargo build --release --workspace" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (the flood is another user's)" >&2; exit 2; }
for c in tmux setpriv curl python3; do
  command -v $c >/dev/null || { echo "$c is needed" >&2; exit 2; }
done
DIR=$(mktemp -d /dev/shm/syncspy-soak-shared.XXXXXX)
chmod 1777 "$DIR"
WORK=$(mktemp -d)
chmod 755 "$WORK"
SOCK=syncspy-soak-$$
PORT=${PORT:-19598}
PIDS=()
cleanup() {
  tmux -L "$SOCK" kill-server 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR" "$WORK"
}
trap cleanup EXIT
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mb() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
mkdir -p "$WORK/lib"
ln -s "$(realpath "$T/libsimcudart.so")" "$WORK/lib/libcudart.so.13"
cp "$T/hostile-writer" "$WORK/hostile-writer"
chmod 755 "$WORK/hostile-writer"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

SYNCSPY_DIR=$DIR "$T/syncspy" agent --listen "127.0.0.1:$PORT" --interval-ms 250 \
  --token-file "$WORK/token" 2>"$WORK/agent.log" &
AGENT=$!; PIDS+=("$AGENT")
tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 160 -y 50 \
  "exec env SYNCSPY_DIR=$DIR TERM=xterm-256color $T/syncspy-top"
TOP=$(tmux -L "$SOCK" list-panes -t top -F '#{pane_pid}')
for _ in $(seq 50); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$PORT/metrics" && break; sleep 0.2; done

as_nobody "$WORK/hostile-writer" wide "$DIR" "$SECS" 1 2>"$WORK/wide.log" & PIDS+=($!)
as_nobody "$WORK/hostile-writer" tiny "$DIR" "$SECS" $(( (SHORT + SECS - 1) / SECS )) 2>"$WORK/tiny.log" & PIDS+=($!)
as_nobody "$WORK/hostile-writer" live "$DIR" "$SECS" "$LIVE" 2>"$WORK/live.log" & PIDS+=($!)
# 1,000 idle connections, reopened as the agent closes them.
python3 - "$PORT" "$SECS" <<'EOF' 2>/dev/null & PIDS+=($!)
import socket, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
socks, end = [], time.time() + secs
while time.time() < end:
    alive = []
    for s in socks:
        try:
            s.setblocking(False)
            if s.recv(1) == b"":
                s.close(); continue
        except BlockingIOError:
            pass
        except OSError:
            s.close(); continue
        alive.append(s)
    socks = alive
    while len(socks) < 1000:
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=1))
        except OSError:
            break
    time.sleep(1)
EOF

metric() { curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" 'index($0, k) == 1 {print $NF; exit}'; }
EVENTS='syncspy_stall_events_total{program="cudacalls",kind="stream_sync"}'
DROPPED='syncspy_reader_dropped_total{what="segment"}'
followed_nobody() {
  curl -s -m 5 -H "Authorization: Bearer $(cat "$WORK/token")" \
    "http://127.0.0.1:$PORT/api/v1/snapshot" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(1 for p in s["processes"] if p["cmdline"].startswith("hostile-writer")))' 2>/dev/null || echo "?"
}
jobs_run=0; job_worst=0; job_fail=0; fail=0
# One root job; prints how long (ms) it took from its end to its count in /metrics.
root_job() {
  local before after t0 t1
  before=$(metric "$EVENTS"); before=${before:-0}
  SYNCSPY_DIR=$DIR LD_PRELOAD=$T/libsyncspy.so LD_LIBRARY_PATH=$WORK/lib SIMCUDA_TIME_SCALE=1 \
    "$T/cudacalls" --iters 5 busy=s1:1000 sync=s1 >/dev/null 2>&1
  t0=$(date +%s%N)
  while :; do
    after=$(metric "$EVENTS"); after=${after:-0}
    t1=$(date +%s%N)
    [ "${after%.*}" -ge $(( ${before%.*} + 5 )) ] && { echo $(( (t1 - t0) / 1000000 )); return; }
    [ $(( t1 - t0 )) -gt 30000000000 ] && { echo -1; return; }
    sleep 0.05
  done
}

printf '| t (s) | agent RSS MB | agent CPU %% | monitor RSS MB | monitor CPU %% | /metrics ms | nobody followed | segments dropped | root job counted after ms |\n'
printf '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
a0=$(ticks "$AGENT"); m0=$(ticks "$TOP"); t0=$(date +%s.%N); start=$t0; next_job=0
agent_max=0; top_max=0; q_max=0
while :; do
  now=$(date +%s.%N)
  el=$(python3 -c "print(int($now - $start))")
  [ "$el" -ge "$SECS" ] && break
  job_ms=""
  if [ "$el" -ge "$next_job" ]; then
    job_ms=$(root_job); jobs_run=$((jobs_run + 1)); next_job=$((el + JOB_EVERY))
    if [ "$job_ms" -lt 0 ]; then job_fail=$((job_fail + 1)); else [ "$job_ms" -gt "$job_worst" ] && job_worst=$job_ms; fi
  fi
  sleep 10
  for p in "$AGENT" "$TOP"; do
    kill -0 "$p" 2>/dev/null || { echo "a reader died (pid $p)" >&2; fail=1; break 2; }
  done
  a1=$(ticks "$AGENT"); m1=$(ticks "$TOP"); t1=$(date +%s.%N)
  q0=$(date +%s%N)
  curl -s -m 5 -o /dev/null "http://127.0.0.1:$PORT/metrics" || { echo "/metrics did not answer in 5 s" >&2; fail=1; }
  q1=$(date +%s%N)
  ar=$(rss_mb "$AGENT"); mr=$(rss_mb "$TOP"); q=$(( (q1 - q0) / 1000000 ))
  [ "$ar" -gt "$agent_max" ] && agent_max=$ar
  [ "$mr" -gt "$top_max" ] && top_max=$mr
  [ "$q" -gt "$q_max" ] && q_max=$q
  python3 -c "
hz, dt = $HZ, $t1 - $t0
print(f'| {$t1 - $start:.0f} | $ar | {100*($a1-$a0)/hz/dt:.1f} | $mr | {100*($m1-$m0)/hz/dt:.1f} | $q | $(followed_nobody) | $(metric "$DROPPED") | ${job_ms:--} |')"
  a0=$a1; m0=$m1; t0=$t1
done
total=$(metric "$EVENTS")
echo
echo "root jobs: $jobs_run run, $job_fail not counted within 30 s, slowest counted after ${job_worst} ms; stream_sync events counted: ${total:-0} (expected $((jobs_run * 5)))"
echo "agent: max RSS ${agent_max} MB (bound ${AGENT_MB}); monitor: max RSS ${top_max} MB (bound ${MONITOR_MB}); slowest /metrics ${q_max} ms"
echo "dropped: $(curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | grep '^syncspy_reader_dropped_total' | tr '\n' ' ')"
grep -m3 "over budget" "$WORK/agent.log" || true
cat "$WORK"/{wide,tiny,live}.log 2>/dev/null || true
[ "$job_fail" = 0 ] || { echo "a root job was not counted" >&2; fail=1; }
[ "${total%.*}" = "$((jobs_run * 5))" ] || { echo "root's counted events differ from its jobs'" >&2; fail=1; }
[ "$agent_max" -le "$AGENT_MB" ] || { echo "agent over its memory bound" >&2; fail=1; }
[ "$top_max" -le "$MONITOR_MB" ] || { echo "monitor over its memory bound" >&2; fail=1; }
exit $fail
