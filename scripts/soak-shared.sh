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
# Several users and pods (issue 35, item 5): with PODS=N, each user of USERS (uids, default
# "65534 65533") also starts N pods' folders, each a mount namespace of its own with a tmpfs
# on /dev/shm (gone with its last process), holding POD_LIVE live tiny segments written by a
# hostile-writer that maps libsyncspy.so, so the agent discovers and follows the folder like a
# pod's. Every JOB_EVERY seconds each of those users, and each user of JOB_USERS (uids that
# flood nothing, default 65530), runs a short job of its own in the folder (cudacalls, copied
# as job-UID), counted like root's. The table then says, per uid, the segments followed over
# every folder and the jobs counted. Every job of root and of JOB_USERS must be counted; a
# flooding user's own job waits for room under that user's cap (by design: reported, waited
# for 5 s only). SYNCSPY_BIN runs another build
# of the agent (the one before a change).
#
#   cargo build --release --workspace && sudo scripts/soak-shared.sh [SECS] [SHORT] [LIVE]
#   PODS=4 sudo -E scripts/soak-shared.sh 120 0 0
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-600}
SHORT=${2:-30000}
LIVE=${3:-1500}
JOB_EVERY=${JOB_EVERY:-15}
AGENT_MB=${AGENT_MB:-1536}
PODS=${PODS:-0}
USERS=${USERS:-65534 65533}
JOB_USERS=${JOB_USERS:-65530}
POD_LIVE=${POD_LIVE:-400}
MONITOR_MB=${MONITOR_MB:-1536}
T=${T:-target/release}
for f in syncspy syncspy-top hostile-writer cudacalls libsyncspy.so libsimcudart.so; do
  [ -e "$T/$f" ] || { echo "missing $T/$f: cargo build --release --workspace" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (the flood is another user's)" >&2; exit 2; }
for c in tmux setpriv curl python3 unshare; do
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
# Anonymous memory only: the segments' pages (shared memory) are charged to their writers'
# cgroups, which made them, not to a reader's.
anon_mb() { awk '/^RssAnon/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
mkdir -p "$WORK/lib"
ln -s "$(realpath "$T/libsimcudart.so")" "$WORK/lib/libcudart.so.13"
cp "$T/hostile-writer" "$WORK/hostile-writer"
cp "$T/libsyncspy.so" "$WORK/lib/libsyncspy.so"
chmod 755 "$WORK/hostile-writer" "$WORK/lib/libsyncspy.so"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_user() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --clear-groups "$@"; }
[ "$PODS" -gt 0 ] || { USERS=""; JOB_USERS=""; }
for u in $USERS $JOB_USERS; do cp "$T/cudacalls" "$WORK/job-$u"; chmod 755 "$WORK/job-$u"; done

SYNCSPY_DIR=$DIR "${SYNCSPY_BIN:-$T/syncspy}" agent --listen "127.0.0.1:$PORT" --interval-ms 250 \
  --token-file "$WORK/token" 2>"$WORK/agent.log" &
AGENT=$!; PIDS+=("$AGENT")
tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 160 -y 50 \
  "exec env SYNCSPY_DIR=$DIR TERM=xterm-256color $T/syncspy-top"
TOP=$(tmux -L "$SOCK" list-panes -t top -F '#{pane_pid}')
for _ in $(seq 50); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$PORT/metrics" && break; sleep 0.2; done

as_nobody "$WORK/hostile-writer" wide "$DIR" "$SECS" 1 2>"$WORK/wide.log" & PIDS+=($!)
as_nobody "$WORK/hostile-writer" tiny "$DIR" "$SECS" $(( (SHORT + SECS - 1) / SECS )) 2>"$WORK/tiny.log" & PIDS+=($!)
as_nobody "$WORK/hostile-writer" live "$DIR" "$SECS" "$LIVE" 2>"$WORK/live.log" & PIDS+=($!)
# Each user's pods: a mount namespace each, its own /dev/shm, the library mapped.
for u in $USERS; do
  for i in $(seq "$PODS"); do
    unshare -m --propagation private sh -c \
      "mount -t tmpfs -o size=256m,mode=1777 syncspy-soak-pod /dev/shm &&
       exec setpriv --reuid=$u --regid=$u --clear-groups env LD_PRELOAD=$WORK/lib/libsyncspy.so \
         $WORK/hostile-writer live /dev/shm $SECS $POD_LIVE" 2>>"$WORK/pods.log" & PIDS+=($!)
  done
done
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

# awk reads the whole page: one that stops early fails curl (SIGPIPE) and, under pipefail, the
# script.
metric() { curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" 'index($0, k) == 1 && !f {print $NF; f = 1}'; }
EVENTS='syncspy_stall_events_total{program="cudacalls",kind="stream_sync"}'
DROPPED='syncspy_reader_dropped_total{what="segment"}'
followed_nobody() {
  curl -s -m 5 -H "Authorization: Bearer $(cat "$WORK/token")" \
    "http://127.0.0.1:$PORT/api/v1/snapshot" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(1 for p in s["processes"] if p["cmdline"].startswith("hostile-writer")))' 2>/dev/null || echo "?"
}
# Segments followed over every folder, per uid (of the process, found by its node pid).
followed_per_uid() {
  curl -s -m 5 -H "Authorization: Bearer $(cat "$WORK/token")" \
    "http://127.0.0.1:$PORT/api/v1/snapshot" |
    python3 -c '
import collections, json, os, sys
s, n = json.load(sys.stdin), collections.Counter()
for p in s["processes"]:
    try: n[os.stat("/proc/%d" % p.get("host_pid", p["pid"])).st_uid] += 1
    except OSError: n["gone"] += 1
print(" ".join(f"{u}:{c}" for u, c in sorted(n.items(), key=str)) or "-")' 2>/dev/null || echo "?"
}
declare -A counted=()
# One short job of user $1 (cudacalls as job-UID, 5 waits); 1 when counted within $2 s.
user_job() {
  local u=$1 wait=$2 key before after t0
  key="syncspy_stall_events_total{program=\"job-$u\",kind=\"stream_sync\"}"
  before=$(metric "$key"); before=${before:-0}
  as_user "$u" env SYNCSPY_DIR="$DIR" LD_PRELOAD="$WORK/lib/libsyncspy.so" LD_LIBRARY_PATH="$WORK/lib" \
    SIMCUDA_TIME_SCALE=1 "$WORK/job-$u" --iters 5 busy=s1:1000 sync=s1 >/dev/null 2>&1 || true
  t0=$(date +%s)
  while :; do
    after=$(metric "$key"); after=${after:-0}
    [ "${after%.*}" -ge $(( ${before%.*} + 5 )) ] && { echo 1; return; }
    [ $(( $(date +%s) - t0 )) -gt "$wait" ] && { echo 0; return; }
    sleep 0.1
  done
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

if [ -n "$USERS" ]; then
  printf '| t (s) | agent RSS MB | agent anon MB | agent CPU %% | /metrics ms | followed per uid | segments dropped | root job counted after ms | jobs counted per uid |\n'
  printf '| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n'
else
  printf '| t (s) | agent RSS MB | agent CPU %% | monitor RSS MB | monitor CPU %% | /metrics ms | nobody followed | segments dropped | root job counted after ms |\n'
  printf '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
fi
for u in $USERS $JOB_USERS; do counted[$u]=0; done
user_jobs=0
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
    for u in $USERS; do counted[$u]=$(( ${counted[$u]} + $(user_job "$u" 5) )); done
    for u in $JOB_USERS; do counted[$u]=$(( ${counted[$u]} + $(user_job "$u" 30) )); done
    [ -n "$USERS" ] && user_jobs=$((user_jobs + 1))
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
  an=$(anon_mb "$AGENT"); [ "$an" -gt "${anon_max:-0}" ] && anon_max=$an
  [ "$mr" -gt "$top_max" ] && top_max=$mr
  [ "$q" -gt "$q_max" ] && q_max=$q
  if [ -n "$USERS" ]; then
    per_job=$(for u in $JOB_USERS $USERS; do printf '%s:%s/%s ' "$u" "${counted[$u]}" "$user_jobs"; done)
    python3 -c "
hz, dt = $HZ, $t1 - $t0
print(f'| {$t1 - $start:.0f} | $ar | $(anon_mb "$AGENT") | {100*($a1-$a0)/hz/dt:.1f} | $q | $(followed_per_uid) | $(metric "$DROPPED") | ${job_ms:--} | ${per_job% } |')"
  else
  python3 -c "
hz, dt = $HZ, $t1 - $t0
print(f'| {$t1 - $start:.0f} | $ar | {100*($a1-$a0)/hz/dt:.1f} | $mr | {100*($m1-$m0)/hz/dt:.1f} | $q | $(followed_nobody) | $(metric "$DROPPED") | ${job_ms:--} |')"
  fi
  a0=$a1; m0=$m1; t0=$t1
done
total=$(metric "$EVENTS")
echo
echo "root jobs: $jobs_run run, $job_fail not counted within 30 s, slowest counted after ${job_worst} ms; stream_sync events counted: ${total:-0} (expected $((jobs_run * 5)))"
echo "agent: max RSS ${agent_max} MB (bound ${AGENT_MB}), of it anonymous at most ${anon_max:-?} MB; monitor: max RSS ${top_max} MB (bound ${MONITOR_MB}); slowest /metrics ${q_max} ms"
echo "dropped: $(curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | grep '^syncspy_reader_dropped_total' | tr '\n' ' ')"
grep -m3 "over budget" "$WORK/agent.log" || true
cat "$WORK"/{wide,tiny,live}.log 2>/dev/null || true
for u in $USERS; do echo "flooding user $u: ${counted[$u]} of $user_jobs jobs counted"; done
for u in $JOB_USERS; do
  echo "user $u: ${counted[$u]} of $user_jobs jobs counted"
  [ "${counted[$u]}" = "$user_jobs" ] || { echo "a job of user $u was not counted" >&2; fail=1; }
done
[ -n "$USERS" ] && { grep -c "following the segments of mount namespace" "$WORK/agent.log" | sed 's/^/pods'"'"' folders followed: /'; cat "$WORK/pods.log" 2>/dev/null | sort | uniq -c | head -5; }
[ "$job_fail" = 0 ] || { echo "a root job was not counted" >&2; fail=1; }
[ "${total%.*}" = "$((jobs_run * 5))" ] || { echo "root's counted events differ from its jobs'" >&2; fail=1; }
[ "$agent_max" -le "$AGENT_MB" ] || { echo "agent over its memory bound" >&2; fail=1; }
[ "$top_max" -le "$MONITOR_MB" ] || { echo "monitor over its memory bound" >&2; fail=1; }
exit $fail
