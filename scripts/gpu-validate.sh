#!/usr/bin/env bash
# Real-GPU validation of the core pipeline (about 3 minutes). Run it on a GPU host with CUDA
# 13, nvcc and PyTorch, in a copy of the repository that holds the release artifacts in .gpu/
# (scripts/gpu-stage.sh, on the development machine). Writes to RESULTS_DIR (default
# ./gpu-results/validate): log.txt, checks.md (scripts/gpu-check.py's tables and verdict) and
# reports.tgz (every report, truth line and stderr). PYTHON and CUDA_HOME: see gpu-host.sh.
#
#   bash scripts/gpu-validate.sh
set -u
. "$(dirname "$0")/gpu-host.sh" validate
gpu_cuda_env
export PYTHONUNBUFFERED=1
R=$RESULTS_DIR/reports
mkdir -p "$R"
export SYNCSPY_DIR=/dev/shm
exec > >(tee "$RESULTS_DIR/log.txt") 2>&1
log() { echo; echo "=== $*"; }

log device; nvidia-smi -L; nvcc --version | tail -2; "$PY" -c 'import torch; print("torch", torch.__version__)'

log "cudacalls: every hooked API, 3 iterations, exact counts vs the program's own account"
OPS="busy=s1:2000 sync=s1 sync-ptsz=sp device-sync event-sync=s1 memcpy=h2d:4096 memcpy=d2h:8192:pinned memcpy-ptds=d2d:1024 memcpy-default=h2d:512 memcpy2d=h2d:64:8 memcpy3d=d2h:16:4:2 peer=2048 async=h2d:1000:pageable:s1 async=d2h:3000:pageable:s1 async=h2d:1000:pinned:s1 async=d2h:1000:registered:s1 async=d2d:1000:pageable:s1 async=h2h:512:pinned:s1 async-ptsz=h2d:100:pageable:sp async2d=h2d:32:4:pageable:s1 async3d=h2d:8:2:2:pinned:s1 free free-null host-alloc=65536 malloc-host=4096 register=8192 memset=4096 memset-host=4096"
$G/syncspy run --report $R/cudacalls-all.json -- $G/cudacalls --iters 3 $OPS > $R/cudacalls-all.truth 2>$R/cudacalls-all.err; echo "exit $?"; cat $R/cudacalls-all.truth

log "cudacalls: durations (5 x 20 ms host-function work then sync; 5 x 10 ms then pageable D2H)"
$G/syncspy run --report $R/cudacalls-dur.json -- $G/cudacalls --iters 5 busy=s1:20000 sync=s1 busy=s1:10000 async=d2h:4096:pageable:s1 > $R/cudacalls-dur.truth; echo "exit $?"; cat $R/cudacalls-dur.truth

log "cudacalls: 6 threads, fork"
$G/syncspy run --report $R/cudacalls-threads.json -- $G/cudacalls --threads 6 --iters 300 sync=s1 sync=sn async=d2h:64:pageable:s1 > $R/cudacalls-threads.truth; echo "exit $?"
$G/syncspy run --report $R/cudacalls-fork.json -- $G/cudacalls --fork --iters 4 sync=s1 memcpy=h2d:100 > $R/cudacalls-fork.truth; echo "exit $?"

log "RTLD_LOCAL: Python ctypes loads a library linked against libcudart.so.13"
$G/syncspy run --report $R/ctypes.json -- "$PY" -c "import ctypes; l=ctypes.CDLL('$G/libcudacaller.so'); print('rc', l.caller_work(4, 2000))"; echo "exit $?"

log "nvcc probe: -cudart shared and the default static runtime (seen at the driver level)"
nvcc -O2 -cudart shared -o /tmp/probe-shared scenarios/cuda/probe.cu && nvcc -O2 -o /tmp/probe-static scenarios/cuda/probe.cu
$G/syncspy run --report $R/probe-shared.json -- /tmp/probe-shared 5; echo "exit $?"
$G/syncspy run --report $R/probe-static.json -- /tmp/probe-static 5; echo "exit $?"

log "PyTorch: each section at 10 and 60 iterations"
for s in item cpu to_cuda_pageable to_cuda_pinned nonzero synchronize; do
  for n in 10 60; do
    $G/syncspy run --report $R/torch-$s-$n.json -- "$PY" scenarios/python/core_validation.py --section $s --iters $n > $R/torch-$s-$n.truth 2>$R/torch-$s-$n.err
    echo "$s $n exit $? $(cat $R/torch-$s-$n.truth)"
  done
done

log "Overhead on a real job: tight loops, us per call, 3 interleaved rounds"
V=scenarios/python/core_validation.py
for i in 1 2 3; do
  echo "tight_item plain         $("$PY" $V --section tight_item --iters 20000)"
  echo "tight_item off           $(SYNCSPY_OFF=1 $G/syncspy run -- "$PY" $V --section tight_item --iters 20000 2>/dev/null)"
  echo "tight_item stacks+cache  $($G/syncspy run --report $R/tight-item-cache-$i.json -- "$PY" $V --section tight_item --iters 20000 2>/dev/null)"
  echo "tight_item stacks        $(SYNCSPY_STACK_CACHE=0 $G/syncspy run --report $R/tight-item-nocache-$i.json -- "$PY" $V --section tight_item --iters 20000 2>/dev/null)"
  echo "tight_item no-stacks     $(SYNCSPY_STACKS=0 $G/syncspy run --report $R/tight-item-nostack-$i.json -- "$PY" $V --section tight_item --iters 20000 2>/dev/null)"
  echo "tight_pinned plain       $("$PY" $V --section tight_pinned --iters 20000)"
  echo "tight_pinned recording   $($G/syncspy run -- "$PY" $V --section tight_pinned --iters 20000 2>/dev/null)"
done
python3 - "$R" <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/tight-*.json")):
    for p in json.load(open(f))["processes"]:
        ev = sum(k["count"] for k in p["kinds"].values())
        print(f.split("/")[-1], "events", ev, "library ns/event %.0f" % (p["overhead_ns"] / max(ev, 1)),
              "unwound", p["stack_captures"], "cache hits", p["stack_cache_hits"])
PY

log "Microbenchmarks (criterion, this machine)"
for b in $G/bench-*; do [ -x "$b" ] || continue; $b --bench --warm-up-time 1 --measurement-time 3 2>&1 | grep -v -E "^(Benchmarking|Found|  [0-9]+ \()" ; done

log "Checks against ground truth"
python3 scripts/gpu-check.py "$R" | tee "$RESULTS_DIR/checks.md"

cd "$RESULTS_DIR" && tar czf reports.tgz reports && rm -rf reports
