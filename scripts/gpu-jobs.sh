#!/usr/bin/env bash
# A distributed job on one GPU host (issue 18): `torchrun --nproc-per-node RANKS` runs
# scripts/gpu_jobs_train.py under `syncspy run`, rank SLOW_RANK with an injected `.item()` per
# step. BACKEND=gloo (the default): every rank on GPU 0, gloo all-reduces on the CPU.
# BACKEND=nccl: one GPU per rank (RANKS GPUs needed), one NCCL all-reduce per step, each rank
# timing its all-reduces with CUDA events. The report must group the ranks into one job and,
# with GPU idle tracing on, name SLOW_RANK the straggler at the injected line (with NCCL: from
# the other ranks' time in collective kernels, compared with their own CUDA-event account).
# Run twice: GPU idle tracing on and off (off: host stall time only; reported, not checked,
# since with the waiting done inside the same `.item()` calls it cannot tell). Then the monitor
# (one screen, syncspy-top --print) while the job runs. Needs torch with CUDA and torchrun; run
# it in a copy of the repository with the release artifacts in .gpu/ (scripts/gpu-stage.sh).
# Results in RESULTS_DIR (default ./gpu-results/jobs): the reports, logs, jobs.md.
# PYTHON: see gpu-host.sh.
#
#   bash scripts/gpu-jobs.sh [RANKS] [SLOW_RANK] [ITERS]
set -uo pipefail
RANKS=${1:-4}
SLOW_RANK=${2:-2}
ITERS=${3:-100}
BACKEND=${BACKEND:-gloo}
. "$(dirname "$0")/gpu-host.sh" jobs
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-jobs.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
TRAIN=scripts/gpu_jobs_train.py
LINE=$(grep -n '# the injected stall' "$TRAIN" | cut -d: -f1)
status=0
for idle in on off; do
  SYNCSPY_GPU_IDLE=$idle "$G/syncspy" run --report "$RESULTS_DIR/job-gpu-$idle.json" -- \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$RANKS" "$TRAIN" \
    --iters "$ITERS" --slow-rank "$SLOW_RANK" --backend "$BACKEND" >"$RESULTS_DIR/job-gpu-$idle.log" 2>&1 \
    || { echo "run (GPU idle $idle): exit $?" >>"$RESULTS_DIR/errors.txt"; status=1; }
done

# The monitor, one screen, while a third run goes on.
"$G/syncspy" run --report "$RESULTS_DIR/job-monitor.json" -- \
  "$PY" -m torch.distributed.run --standalone --nproc-per-node "$RANKS" "$TRAIN" \
  --iters "$((ITERS * 5))" --slow-rank "$SLOW_RANK" --backend "$BACKEND" >"$RESULTS_DIR/job-monitor.log" 2>&1 &
run=$!
[ -x "$G/syncspy-top" ] && "$G/syncspy-top" --print --after 8 --size 160x50 \
  >"$RESULTS_DIR/monitor.txt" 2>&1
wait "$run"

"$PY" - "$RESULTS_DIR" "$RANKS" "$SLOW_RANK" "$TRAIN" "$LINE" <<'PYEOF' | tee "$RESULTS_DIR/jobs.md"
import json, pathlib, sys
res, ranks, slow, train, line = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
want = f"{pathlib.Path(train).name}:{line}"
bad = 0
for idle in ("on", "off"):
    f = res / f"job-gpu-{idle}.json"
    if not f.exists():
        print(f"GPU idle {idle}: no report"); bad += 1; continue
    r = json.loads(f.read_text())
    jobs = r.get("jobs", [])
    print(f"## GPU idle {idle}\n")
    if len(jobs) != 1 or len(jobs[0]["ranks"]) != ranks:
        print(f"FAIL: expected one job of {ranks} ranks, got {[(j['id'], len(j['ranks'])) for j in jobs]}\n")
        bad += 1; continue
    j = jobs[0]
    print(f"job {j['id']} ({j['launcher']}), basis {j['basis']}\n")
    # Each rank's own account (its JSON line): CUDA-event time in its all-reduces (NCCL).
    own = {}
    for l in (res / f"job-gpu-{idle}.log").read_text().splitlines():
        i = l.find('{"rank"')
        if i >= 0:
            try:
                d = json.loads(l[i:])
                own[d["rank"]] = d
            except ValueError:
                pass
    ar = {r: d.get("allreduce_ms") for r, d in own.items()}
    ar_slow = ar.get(slow)
    print("| rank | pid | host stalls ms | score ms | collective ms (syncspy) | all-reduce ms (CUDA events) "
          "| waited ms: syncspy / CUDA events | top call site |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in j["ranks"]:
        t = k.get("top_site") or {}
        r = k.get("rank")
        coll = k.get("collective_ns")
        wait = k.get("collective_wait_ns")
        own_wait = (ar[r] - ar_slow) if ar.get(r) is not None and ar_slow is not None else None
        f = lambda v, d=1e6: "-" if v is None else f"{v / d:.1f}"
        print(f"| {r} | {k['pid']} | {k['stall_ns']/1e6:.1f} | {k['score_ns']/1e6:.1f} | {f(coll)} | "
              f"{f(ar.get(r), 1)} | {f(wait)} / {f(own_wait, 1)} | {t.get('kind', '')} at {t.get('location', '')} |")
    s = j.get("straggler")
    loc = ((s or {}).get("top_site") or {}).get("location") or ""
    ok = s is not None and s.get("rank") == slow and f"{want} " in f"{loc} "
    excess = (s or {}).get("excess_ns", 0) / 1e6
    checked = idle == "on"
    verdict = ("PASS" if ok else "FAIL") if checked else ("named" if ok else "not named") + " (not checked)"
    print(f"\nstraggler: {s and s.get('rank')} at {loc!r}, excess {excess:.1f} ms, "
          f"waited ranks {(s or {}).get('waited_ranks')}, waited {((s or {}).get('waited_ns') or 0)/1e6:.1f} ms: "
          f"{verdict} (want rank {slow} at {want})\n")
    bad += checked and not ok
sys.exit(1 if bad else 0)
PYEOF
checked=$?
[ "$status" -ne 0 ] && exit "$status"
exit "$checked"
