#!/usr/bin/env bash
# syncspy's cost inside one process (scripts/compare_ab.py): recording switched on and off
# by `syncspy attach` / `syncspy detach` under a job started with libsyncspy.so preloaded
# dormant, in ABBA blocks, with the noise floor of the same run. Run it on a GPU host with
# PyTorch, in a copy of the repository that holds the release artifacts in .gpu/
# (scripts/gpu-stage.sh). Results in RESULTS_DIR (default ./gpu-results/compare-ab): one JSON
# per row and ab.md, the table of docs/performance.md. PYTHON: see gpu-host.sh.
#
#   [CPUS=2,3] [SETTLE=S] bash scripts/compare-ab.sh [CYCLES] [BLOCK_SECONDS] [ROWS]
#     ROWS: comma-separated workload:mode (default: launch-heavy:stalls,launch-heavy:python,
#           launch-heavy:gpu-on,compute-heavy:python,compute-heavy:gpu-on). Workloads:
#           launch-heavy, compute-heavy, and mlp, transformer, jax (the steps of
#           scenarios/python/cost_workloads.py); modes: stalls, python, gpu-on (attach's
#           default), duty (`syncspy run`'s default; SETTLE=1.5 times blocks after the
#           first traced second of each attach)
set -uo pipefail
CYCLES=${1:-8}
BLOCK=${2:-1.5}
ROWS=${3:-launch-heavy:stalls,launch-heavy:python,launch-heavy:gpu-on,compute-heavy:python,compute-heavy:gpu-on}
. "$(dirname "$0")/gpu-host.sh" compare-ab
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-ab.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
R=$RESULTS_DIR
{
  echo "| workload | syncspy mode | ms/step off | on / off, median over cycles [95% CI] | noise floor: off / off [95% CI] | cycles x blocks |"
  echo "| --- | --- | ---: | ---: | ---: | ---: |"
} >"$R/ab.md"
for row in ${ROWS//,/ }; do
  w=${row%%:*} m=${row##*:}
  LD_PRELOAD="$G/libsyncspy.so" SYNCSPY_DORMANT=1 "$PY" scripts/compare_ab.py --syncspy "$G/syncspy" \
    --workload "$w" --mode "$m" --cycles "$CYCLES" --block "$BLOCK" --out "$R/$w-$m.json" \
    ${SETTLE:+--settle "$SETTLE"} \
    ${CPUS:+--cpus "$CPUS"} \
    >"$R/$w-$m.log" 2>&1
  rc=$?
  tail -1 "$R/$w-$m.log"
  if [ $rc -ne 0 ]; then
    echo "| $w | $m | failed (rc $rc, see $w-$m.log) | | | |" >>"$R/ab.md"
    continue
  fi
  "$PY" - "$R/$w-$m.json" >>"$R/ab.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
o, n = r["on_over_off"], r["noise_floor"]
print(f"| {r['workload']} | {r['mode']} | {r['ms_per_step_off']:.3f} | {o['median']:.4f} [{o['ci95'][0]:.4f}, {o['ci95'][1]:.4f}] "
      f"| {n['median']:.4f} [{n['ci95'][0]:.4f}, {n['ci95'][1]:.4f}] | {r['cycles']} x 4 x {r['block_s']:g} s |")
PY
done
cat "$R/ab.md"
