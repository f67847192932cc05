"""Host waits at a JAX-like rate on the simulated driver (no GPU): each of N steps queues a
host function that sleeps (`usleep`, the step's GPU work) and one that wakes the main thread,
which waits for it; twice per step, at two lines (`# rate-wait:a`, `# rate-wait:b`), four host
functions a step. With `--relay` the wake goes through another Python thread (as XLA's host
functions hand their work to a thread of XLA's). Run it under `syncspy run --sim --report`
and count the `host_wait`s at the two lines (N each) and `processes[].cost.looks_skipped`:

    syncspy run --sim --report r.json -- python3 scenarios/python/host_wait_rate.py 2000
"""
import ctypes
import sys
import threading
import time

relay_mode = "--relay" in sys.argv
N = int(next((a for a in sys.argv[1:] if not a.startswith("--")), "2000"))
cu = ctypes.CDLL("libcuda.so.1")
libc = ctypes.CDLL(None)
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
s = ctypes.c_void_p()
assert cu.cuStreamCreate(ctypes.byref(s), 0) == 0
cu.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
usleep = ctypes.cast(libc.usleep, ctypes.c_void_p)
post = ctypes.cast(libc.sem_post, ctypes.c_void_p)
woken = ctypes.create_string_buffer(64)  # what the main thread waits on
assert libc.sem_init(woken, 0, 0) == 0
handed = ctypes.create_string_buffer(64)  # with --relay: what the host function posts
assert libc.sem_init(handed, 0, 0) == 0
target = handed if relay_mode else woken


def relay():
    for _ in range(2 * N):
        libc.sem_wait(handed)
        libc.sem_post(woken)


if relay_mode:
    t = threading.Thread(target=relay)
    t.start()
t0 = time.perf_counter()
for _ in range(N):
    assert cu.cuLaunchHostFunc(s, usleep, 500) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(target)) == 0
    libc.sem_wait(woken)  # rate-wait:a
    assert cu.cuLaunchHostFunc(s, usleep, 200) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(target)) == 0
    libc.sem_wait(woken)  # rate-wait:b
if relay_mode:
    t.join()
print(f"{N} steps in {time.perf_counter() - t0:.3f} s", flush=True)
