"""Host functions with CuPy (issue 26): a thread that waits for a host function the GPU
reaches, and host functions captured into a CUDA graph.

- `waits` times: a chain of matmuls on a stream, then `Stream.launch_host_func` of a Python
  callback that sets a `threading.Event`, which the main thread waits on (marker
  `# host-wait:event`): one `host_wait` each at that line.
- a graph captured on a stream with one host function in it, launched `replays` times: the
  host function must run at every replay (the library leaves captured host functions as they
  are; before, a replay after the first would have skipped it).

Prints one JSON line with the ground truth (its counts, the marker's line, the time it spent
waiting by its own clock)."""
import argparse
import json
import re
import threading
import time

import cupy as cp

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--waits", type=int, default=10)
ap.add_argument("--replays", type=int, default=5)
ap.add_argument("--size", type=int, default=4096)
args = ap.parse_args()


def line_of(marker):
    with open(__file__) as f:
        for i, text in enumerate(f, 1):
            if re.search(r"\S.*#\s*" + marker + r"\s*$", text):
                return i
    return None


s = cp.cuda.Stream(non_blocking=True)
a = cp.random.random((args.size, args.size), dtype=cp.float32)
cp.cuda.Device().synchronize()
waited = 0.0
with s:
    for _ in range(args.waits):
        b = a
        for _ in range(8):
            b = b @ a
        done = threading.Event()
        s.launch_host_func(lambda ev: ev.set(), done)
        t0 = time.perf_counter()
        done.wait()  # host-wait:event
        waited += time.perf_counter() - t0

runs = [0]


def count(_):
    runs[0] += 1


g_stream = cp.cuda.Stream(non_blocking=True)
g_stream.begin_capture()
with g_stream:
    c = a + 1
g_stream.launch_host_func(count, None)
graph = g_stream.end_capture()
for _ in range(args.replays):
    graph.launch(g_stream)
g_stream.synchronize()
print(json.dumps({"scenario": "cupy-host-func", "lines": {"event": line_of("host-wait:event")},
                  "ops": {"event": args.waits, "replays": args.replays, "graph_host_runs": runs[0]},
                  "wall_ms": {"event": waited * 1e3}, "ok": runs[0] == args.replays}), flush=True)
