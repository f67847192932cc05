#!/usr/bin/env bash
# Python call sites on a real PyTorch job. Run it on a GPU host with PyTorch, in a copy of the
# repository that holds the release artifacts in .gpu/ (scripts/gpu-stage.sh). Each script of
# scenarios/python with a `# syncspy-site` mark runs under `syncspy run`; its report's top call
# sites must be the marked lines (scripts/gpu-python-sites.py checks it). Then the added cost of
# Python frames: the tight `.item()` loop with SYNCSPY_PYTHON=1 and =0, interleaved. Results in
# RESULTS_DIR (default ./gpu-results/python-sites): the reports, python-sites.md, cost.md.
# PYTHON: see gpu-host.sh.
#
#   bash scripts/gpu-python-sites.sh [ROUNDS]
set -uo pipefail
ROUNDS=${1:-5}
. "$(dirname "$0")/gpu-host.sh" python-sites
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-pysites.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT

for s in scenarios/python/*.py; do
  grep -q '# syncspy-site' "$s" || continue
  n=$(basename "$s" .py)
  "$G/syncspy" run --report "$RESULTS_DIR/py-$n.json" -- "$PY" "$s" --iters 50 \
    >"$RESULTS_DIR/py-$n.log" 2>&1 || echo "$n: exit $?" >>"$RESULTS_DIR/errors.txt"
done
"$PY" scripts/gpu-python-sites.py "$RESULTS_DIR"
sites=$?

# Cost: a small step, so the loop is all .item() waits and the library's own time shows.
for r in $(seq "$ROUNDS"); do
  for py in 1 0; do
    SYNCSPY_PYTHON=$py "$G/syncspy" run --report "$RESULTS_DIR/cost-$py-$r.json" -- \
      "$PY" scenarios/python/item_in_loop.py --iters 3000 --size 256 \
      >"$RESULTS_DIR/cost-$py-$r.log" 2>&1
  done
done
"$PY" - "$RESULTS_DIR" "$ROUNDS" <<'PYEOF' | tee "$RESULTS_DIR/cost.md"
import json, pathlib, statistics, sys
res, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def one(py, r):
    rep = json.loads((res / f"cost-{py}-{r}.json").read_text())
    p = max(rep["processes"], key=lambda p: p["recorded_events"])
    truth = [l for l in (res / f"cost-{py}-{r}.log").read_text().splitlines() if l.startswith("{")]
    loop_ms = json.loads(truth[-1])["wall_ms"]["loop"] if truth else float("nan")
    ev = max(p["recorded_events"], 1)
    return loop_ms / 3000 * 1e3, p["overhead_ns"] / ev, p["stack_ns"] / ev, ev
print("| SYNCSPY_PYTHON | loop us/step (median, min-max) | library ns/recorded event | of which stacks | events |")
print("| --- | --- | --- | --- | --- |")
for py in (1, 0):
    v = [one(py, r) for r in range(1, rounds + 1)]
    step = [x[0] for x in v]
    print(f"| {py} | {statistics.median(step):.1f} ({min(step):.1f}-{max(step):.1f}) | "
          f"{statistics.median(x[1] for x in v):.0f} | {statistics.median(x[2] for x in v):.0f} | "
          f"{v[0][3]} |")
PYEOF
# The criterion benchmark of the Python step, when gpu-stage.sh built it.
[ -x "$G/bench-python" ] && "$G/bench-python" --bench >"$RESULTS_DIR/bench-python.txt" 2>&1
exit $sites
