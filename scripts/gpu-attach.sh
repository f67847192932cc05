#!/usr/bin/env bash
# `syncspy attach` on a real PyTorch job. Run it on a GPU host with PyTorch, in a copy of the
# repository that holds the release artifacts in .gpu/ (scripts/gpu-stage.sh: syncspy and
# libsyncspy.so are all it needs). The training loop scenarios/python/train_mlp.py runs twice
# for SECS seconds, without syncspy (control), and alone again while `syncspy attach` attaches
# to it mid-run for FOR seconds, detaches, waits GAP seconds and attaches a second time for
# FOR seconds. Results in RESULTS_DIR (default ./gpu-results/attach): attach.md (step times
# before / while attached / between / while re-attached / after, exit codes, whether the
# losses equal the control run's step for step; GPU idle gaps while attached; syncspy threads
# left after detach), the attach reports and logs, the step logs. Then, where ptrace works,
# scripts/gpu-attach-target.py (the CI's attach target built against the real runtime and
# driver): target.md.
# PYTHON: see gpu-host.sh.
#
#   [MODE=auto|ptrace|dormant] bash scripts/gpu-attach.sh [SECS] [AT] [FOR] [GAP]
#                                                        (defaults 40 8 6 6)
set -uo pipefail
SECS=${1:-40}
AT=${2:-8}
FOR=${3:-6}
GAP=${4:-6}
. "$(dirname "$0")/gpu-host.sh" attach
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-attach.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
R=$RESULTS_DIR
: >"$R/events.txt"
ev() { echo "$1 $(date +%s.%N)" >>"$R/events.txt"; }

# Control: the same job, nobody attaches.
"$PY" scenarios/python/train_mlp.py --seconds "$SECS" --step-log "$R/steps-control.txt" \
  >"$R/control.log" 2>&1
echo $? >"$R/control.exit"

# The job, attached to twice while it trains. MODE=ptrace injects into a plain job; where
# ptrace is not permitted (a container without CAP_SYS_PTRACE) MODE=auto falls back to
# MODE=dormant: the job starts with libsyncspy.so preloaded dormant and attach arms it.
attached_run() {
  local preload=()
  [ "$1" = dormant ] && preload=(env LD_PRELOAD="$G/libsyncspy.so" SYNCSPY_DORMANT=1)
  : >"$R/events.txt"
  "${preload[@]}" "$PY" scenarios/python/train_mlp.py --seconds "$SECS" \
    --step-log "$R/steps-attached.txt" >"$R/attached.log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do grep -q "training for" "$R/attached.log" 2>/dev/null && break; sleep 0.1; done
  ev started
  sleep "$AT"
  for n in 1 2; do
    ev "attach$n"
    "$G/syncspy" attach "$PID" --duration "$FOR" --report "$R/attach$n.json" >"$R/attach$n.log" 2>&1
    echo $? >"$R/attach$n.exit"
    ev "detach$n"
    # What of syncspy still runs in the job after detach (expected: nothing).
    cat /proc/"$PID"/task/*/comm 2>/dev/null | grep -E 'syncspy|cupti' >"$R/threads-after-detach$n.txt"
    [ "$n" = 1 ] && sleep "$GAP"
  done
  wait "$PID"
  echo $? >"$R/attached.exit"
  echo "$1" >"$R/mode.txt"
}
MODE=${MODE:-auto}
attached_run "$([ "$MODE" = dormant ] && echo dormant || echo ptrace)"
if [ "$MODE" = auto ] && grep -q "not permitted" "$R/attach1.log"; then
  mv "$R/attach1.log" "$R/attach1-ptrace-refused.log"
  attached_run dormant
fi
grep -h "stopped for" "$R"/attach?.log >"$R/stops.txt"

"$PY" - "$R" <<'PYEOF' | tee "$R/attach.md"
import json, pathlib, statistics, sys
r = pathlib.Path(sys.argv[1])
ev = {k: float(v) for k, v in (l.split() for l in (r / "events.txt").read_text().splitlines())}
def steps(name):
    rows = [l.split() for l in (r / f"steps-{name}.txt").read_text().splitlines()]
    return [float(t) for t, _ in rows], [l for _, l in rows]
t, loss = steps("attached")
_, loss_c = steps("control")
dur = [b - a for a, b in zip(t, t[1:])]
ends = t[1:]
windows = [("before attach", ev["started"], ev["attach1"]),
           ("attached", ev["attach1"], ev["detach1"]),
           ("detached", ev["detach1"], ev["attach2"]),
           ("attached again", ev["attach2"], ev["detach2"]),
           ("after detach", ev["detach2"], float("inf"))]
print("| window | steps | median step ms | p90 step ms |")
print("| --- | --- | --- | --- |")
for name, a, b in windows:
    d = sorted(x for x, e in zip(dur, ends) if a <= e < b)
    if d:
        print(f"| {name} | {len(d)} | {statistics.median(d)*1e3:.2f} | {d[int(0.9*(len(d)-1))]*1e3:.2f} |")
    else:
        print(f"| {name} | 0 | | |")
n = min(len(loss), len(loss_c))
same = loss[:n] == loss_c[:n]
diff = max((abs(float(a) - float(b)) for a, b in zip(loss[:n], loss_c[:n])), default=0.0)
print()
print(f"- mode: {(r/'mode.txt').read_text().strip()}")
print(f"- exit codes: control {(r/'control.exit').read_text().strip()}, attached "
      f"{(r/'attached.exit').read_text().strip()}; syncspy attach "
      f"{(r/'attach1.exit').read_text().strip()}, {(r/'attach2.exit').read_text().strip()}")
print(f"- losses of the first {n} steps equal the control run's, step for step: {same} "
      f"(largest difference {diff:.3g}; expected equal where the job is deterministic)")
for i in (1, 2):
    try:
        rep = json.loads((r / f"attach{i}.json").read_text())
        p = max(rep["processes"], key=lambda p: p["recorded_events"])
        kinds = ", ".join(f"{k} {v['count']}" for k, v in sorted(p["kinds"].items()))
        print(f"- attach {i}: {kinds}")
        g = p.get("gpu") or {}
        busy = g.get("busy_fraction")
        causes = g.get("causes") or []
        top = (f"{causes[0]['share']:.0%} blamed on {causes[0].get('location') or causes[0]['cause']}"
               if causes else "no cause")
        print(f"  GPU while attached: mode {g.get('mode')}, state {g.get('state')}, "
              f"busy {'n/m' if busy is None else f'{busy:.1%}'}, "
              f"{g.get('idle', {}).get('count', 0)} gaps "
              f"(p50 {g.get('idle', {}).get('p50_ns', 0) / 1e3:.0f} us), "
              f"{g.get('records', 0)} activity records; {top}")
        names = (r / f"threads-after-detach{i}.txt").read_text().split()
        left = [n for n in names if n.startswith("syncspy")]
        print(f"  syncspy threads left in the job after detach: {left or 'none'}; "
              f"CUPTI's (loaded by the first attach, kept by CUPTI): {names.count('cupti')}")
    except Exception as e:  # the report is missing: the log says why
        print(f"- attach {i}: no report ({e})")
for l in (r / "stops.txt").read_text().splitlines():
    print(f"- {l.strip()}")
PYEOF

# The CI's attach target against the real runtime and driver (scripts/gpu-attach-target.py):
# exact counts of runtime and driver calls made while attached, GOT bytes, threads, registers.
if [ "$(cat "$R/mode.txt")" = ptrace ] && command -v gcc >/dev/null; then
  gpu_cuda_env
  "$PY" scripts/gpu-attach-target.py "$G" "$CUDA_HOME/targets/x86_64-linux/lib" "$R/target" \
    2>&1 | tee "$R/target.md"
fi
