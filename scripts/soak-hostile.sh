#!/usr/bin/env bash
# Soak: `syncspy agent` and `syncspy-top` against a hostile writer (scenarios/src/bin/
# hostile_writer.rs: a call-site id per record, most outside the site table, distinct stacks
# until the table is full, every kind and API, totals at u64::MAX, a FIFO and symlinks under
# segment names) for SECS seconds. Every 10 s it samples both readers' resident memory and CPU
# and times a /metrics request; it prints a table and fails if a reader died or a request took
# longer than 5 s. Release binaries from target/release (T=... for another folder).
#
#   cargo build --release --workspace && scripts/soak-hostile.sh [SECS] [RATE]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3600}
RATE=${2:-200000}
T=${T:-target/release}
for f in syncspy syncspy-top hostile-writer; do
  [ -x "$T/$f" ] || { echo "missing $T/$f: cargo build --release --workspace" >&2; exit 2; }
done
command -v tmux >/dev/null || { echo "tmux is needed" >&2; exit 2; }
DIR=$(mktemp -d /dev/shm/syncspy-soak.XXXXXX)
TOK=$(mktemp -d)
SOCK=syncspy-soak-$$
PORT=${PORT:-19599}
cleanup() {
  tmux -L "$SOCK" kill-server 2>/dev/null || true
  for p in ${AGENT:-} ${WRITER:-}; do kill "$p" 2>/dev/null || true; done
  rm -rf "$DIR" "$TOK"
}
trap cleanup EXIT
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

"$T/hostile-writer" "$DIR" "$SECS" "$RATE" 2>"$TOK/writer.log" &
WRITER=$!
sleep 0.5
SYNCSPY_DIR=$DIR "$T/syncspy" agent --listen "127.0.0.1:$PORT" --interval-ms 250 \
  --token-file "$TOK/token" 2>"$TOK/agent.log" &
AGENT=$!
tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 120 -y 40 \
  "exec env SYNCSPY_DIR=$DIR TERM=xterm-256color $T/syncspy-top"
TOP=$(tmux -L "$SOCK" list-panes -t top -F '#{pane_pid}')
sleep 2
printf '| t (s) | agent RSS MB | agent CPU %% | monitor RSS MB | monitor CPU %% | /metrics ms |\n'
printf '| ---: | ---: | ---: | ---: | ---: | ---: |\n'
fail=0
a0=$(ticks "$AGENT"); m0=$(ticks "$TOP"); t0=$(date +%s.%N); start=$t0
while kill -0 "$WRITER" 2>/dev/null; do
  sleep 10
  for p in "$AGENT" "$TOP"; do
    kill -0 "$p" 2>/dev/null || { echo "a reader died (pid $p)" >&2; fail=1; break 2; }
  done
  a1=$(ticks "$AGENT"); m1=$(ticks "$TOP"); t1=$(date +%s.%N)
  q0=$(date +%s%N)
  curl -s -m 5 -o /dev/null "http://127.0.0.1:$PORT/metrics" || { echo "/metrics did not answer in 5 s" >&2; fail=1; }
  q1=$(date +%s%N)
  python3 -c "
hz, dt = $HZ, $t1 - $t0
print(f'| {$t1 - $start:.0f} | $(rss_mb "$AGENT") | {100*($a1-$a0)/hz/dt:.1f} | $(rss_mb "$TOP") | {100*($m1-$m0)/hz/dt:.1f} | {($q1-$q0)/1e6:.1f} |')"
  a0=$a1; m0=$m1; t0=$t1
done
cat "$TOK/writer.log"
exit $fail
