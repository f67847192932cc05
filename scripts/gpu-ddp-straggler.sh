#!/usr/bin/env bash
# Distributed training told right (issue 33), on a GPU host with two or more GPUs:
# scripts/gpu_ddp_straggler.py under `torchrun --nproc-per-node RANKS`, rank LATE reading
# `.item()` and then doing 15 ms of host work before each all-reduce, under `syncspy run` with
# default settings, RUNS times. Each report must name rank LATE the straggler at the marked
# line, from the ranks' own NCCL measurements (`collective_source` nccl_calls), with no
# `poll_wait` in any rank (PyTorch's NCCL watchdog queries every 100 ms and sleeps between),
# and each waiting rank's host stall total within 5% of the waits it measured itself.
# Then the cost of the collective hooks: the all-reduce-heavy loop (`--mode cost`), bare and
# under `syncspy run`, interleaved, ROUNDS rounds. Needs the release artifacts in .gpu/
# (scripts/gpu-stage.sh). Results in RESULTS_DIR (default ./gpu-results/ddp): reports, logs,
# ddp.md.
#
#   [RUNS=5] [ROUNDS=5] bash scripts/gpu-ddp-straggler.sh [RANKS] [LATE]
set -uo pipefail
RANKS=${1:-2}
LATE=${2:-1}
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-5}
. "$(dirname "$0")/gpu-host.sh" ddp
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-ddp.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
TRAIN=scripts/gpu_ddp_straggler.py
job() { "$PY" -m torch.distributed.run --standalone --nproc-per-node "$RANKS" "$TRAIN" "$@"; }
for i in $(seq "$RUNS"); do
  "$G/syncspy" run --report "$RESULTS_DIR/straggler-$i.json" -- \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$RANKS" "$TRAIN" \
    --late "$LATE" >"$RESULTS_DIR/straggler-$i.log" 2>&1
done
for r in $(seq "$ROUNDS"); do
  job --mode cost --steps 20000 >"$RESULTS_DIR/cost-bare-$r.log" 2>&1
  "$G/syncspy" run --report "$RESULTS_DIR/cost-$r.json" -- \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$RANKS" "$TRAIN" \
    --mode cost --steps 20000 >"$RESULTS_DIR/cost-syncspy-$r.log" 2>&1
done
"$PY" - "$RESULTS_DIR" "$RUNS" "$ROUNDS" "$LATE" "$TRAIN" <<'PYEOF' | tee "$RESULTS_DIR/ddp.md"
import json, pathlib, statistics, sys
res, runs, rounds, late, train = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
line = next(i for i, l in enumerate(open(train), 1) if "# the late rank's line" in l)
want = f"{pathlib.Path(train).name}:{line}"
def own(log):
    # Two ranks' lines may share a line of the log: decode every object that starts there.
    text, dec, out = open(log).read(), json.JSONDecoder(), {}
    i = text.find('{"rank"')
    while i >= 0:
        d, end = dec.raw_decode(text, i)
        out[d["rank"]] = d
        i = text.find('{"rank"', end)
    return out
bad = 0
print(f"| run | verdict | source | rank {late} site | poll_wait per rank | stall vs own waits per rank |")
print("|---|---|---|---|---|---|")
for i in range(1, runs + 1):
    f = res / f"straggler-{i}.json"
    if not f.exists():
        print(f"| {i} | no report | | | | |"); bad += 1; continue
    r = json.loads(f.read_text())
    jobs = r.get("jobs", [])
    j = jobs[0] if jobs else {}
    s = j.get("straggler") or {}
    site = (s.get("top_site") or {}).get("location", "")
    mine = own(res / f"straggler-{i}.log")
    pw, ratio = [], []
    for p in r["processes"]:
        k = (p.get("job") or {}).get("rank")
        if k is None:
            continue
        pw.append(f"{k}: {p['kinds'].get('poll_wait', {}).get('count', 0)}")
        m = mine.get(k)
        if m and k != late:
            q = p["stall_ns"] / max(m["waits_ns"], 1)
            ratio.append(f"{k}: {p['stall_ns']/1e6:.1f}/{m['waits_ns']/1e6:.1f} ms = {q:.3f}")
            bad += not (0.95 <= q <= 1.05)
        bad += p["kinds"].get("poll_wait", {}).get("count", 0) > 0
    ok = s.get("rank") == late and want in site and j.get("collective_source") == "nccl_calls"
    bad += not ok
    verdict = f"rank {s.get('rank')}" if s else "none"
    print(f"| {i} | {verdict} {'ok' if ok else 'WRONG'} | {j.get('collective_source')} | {site} | {', '.join(pw)} | {'; '.join(ratio)} |")
    for jj in jobs:
        print(f"\n  {json.dumps({k: v for k, v in jj.items() if k != 'ranks'})[:600]}\n")
def loops(kind):
    out = []
    for rd in range(1, rounds + 1):
        m = own(res / f"cost-{kind}-{rd}.log")
        if m:
            out.append(statistics.mean(d["loop_s"] for d in m.values()))
    return out
bare, spy = loops("bare"), loops("syncspy")
print("\n| round | bare s | syncspy s | ratio |\n|---|---|---|---|")
for k, (a, b) in enumerate(zip(bare, spy), 1):
    print(f"| {k} | {a:.3f} | {b:.3f} | {b/a:.3f} |")
if bare and spy:
    rs = sorted(b / a for a, b in zip(bare, spy))
    print(f"\nmedian ratio {statistics.median(rs):.3f} (spread {rs[0]:.3f} to {rs[-1]:.3f})")
for rd in range(1, rounds + 1):
    f = res / f"cost-{rd}.json"
    if f.exists():
        r = json.loads(f.read_text())
        print(f"cost round {rd}: " + "; ".join(f"rank {(p.get('job') or {}).get('rank')}: {json.dumps(p.get('collectives'))}" for p in r["processes"] if p.get("job")))
print(f"\n{'PASS' if bad == 0 else f'FAIL ({bad})'}")
PYEOF
