#!/usr/bin/env bash
# The agent's CPU with N files sitting unchanged in its folder (named like segments, owned by
# nobody, not readable as segments), while a file appears and goes every 100 ms (waking the
# agent at its minimum step gap). Run as root (the files are another user's):
#
#   cargo build --release -p syncspy-cli && sudo scripts/folder-cost.sh target/release 30000 30
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root (the files are another user's)" >&2; exit 2; }
T=${1:-target/release}; N=${2:-30000}; SECS=${3:-30}; PORT=${PORT:-19611}
DIR=$(mktemp -d /dev/shm/syncspy-foldercost.XXXXXX); chmod 1777 "$DIR"
WORK=$(mktemp -d)
python3 - "$DIR" "$N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    p = os.path.join(d, f"syncspy-{2000000+i}-{i}")
    with open(p, "wb") as f: f.write(b"\x55" * 4096)
    os.chown(p, 65534, 65534); os.chmod(p, 0o600)
PY
SYNCSPY_DIR=$DIR "$T/syncspy" agent --listen "127.0.0.1:$PORT" --interval-ms 250 --token-file "$WORK/token" 2>"$WORK/agent.log" &
A=$!
cleanup() { kill $A 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR" "$WORK"; }
trap cleanup EXIT
sleep 8
HZ=$(getconf CLK_TCK)
t0=$(awk '{print $14+$15}' /proc/$A/stat); s0=$(date +%s.%N)
end=$(( $(date +%s) + SECS )); i=0
while [ "$(date +%s)" -lt "$end" ]; do
  touch "$DIR/x-$i"; rm -f "$DIR/x-$((i-1))"; i=$((i+1)); sleep 0.1
done
t1=$(awk '{print $14+$15}' /proc/$A/stat); s1=$(date +%s.%N)
rss=$(awk '/^VmRSS/ {printf "%.0f", $2/1024}' /proc/$A/status)
python3 -c "print(f'N=$N: agent CPU {100*($t1-$t0)/$HZ/($s1-$s0):.1f}% of a core over {$s1-$s0:.0f} s, RSS $rss MB')"
