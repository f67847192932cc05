"""What a JAX loop asks of the CUDA driver, thread by thread: a research probe for a GPU host.

Enables CUPTI's driver-API activity records (through ctypes, no syncspy involved) after the
first jitted call has compiled, runs a loop of `block_until_ready` and `jax.device_get`, and
prints, per thread, how many times each driver function was called during the loop, then one
step's calls in time order next to the moments the Python thread entered and left each wait.
It answers: which thread enqueues the work, what completes the user's wait (a host function,
an event query, a synchronize), and when.

    python3 scripts/gpu-jax-trace.py [--iters 10] [--cupti PATH]
"""
import argparse
import collections
import ctypes
import glob
import os
import threading

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--iters", type=int, default=10)
ap.add_argument("--size", type=int, default=2048)
ap.add_argument("--cupti", default=None, help="path of libcupti.so (default: searched)")
args = ap.parse_args()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def find_cupti():
    if args.cupti:
        return args.cupti
    pats = ["/usr/local/cuda*/targets/x86_64-linux/lib/libcupti.so*",
            "/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"]
    for p in pats:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[-1]
    raise SystemExit("libcupti not found; pass --cupti")


cupti = ctypes.CDLL(find_cupti())
KIND_DRIVER = 4
DOMAIN_DRIVER = 1
REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                       ctypes.POINTER(ctypes.c_size_t))
DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_size_t)


class ApiRecord(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("cbid", ctypes.c_uint32), ("start", ctypes.c_uint64),
                ("end", ctypes.c_uint64), ("pid", ctypes.c_uint32), ("tid", ctypes.c_uint32),
                ("corr", ctypes.c_uint32), ("ret", ctypes.c_uint32)]


buffers = {}
records = []
lock = threading.Lock()


@REQ
def request(buf, size, max_records):
    b = ctypes.create_string_buffer(8 << 20)
    addr = ctypes.addressof(b)
    buffers[addr] = b
    buf[0] = addr
    size[0] = 8 << 20
    max_records[0] = 0


@DONE
def complete(ctx, stream, buf, size, valid):
    rec = ctypes.c_void_p()
    while cupti.cuptiActivityGetNextRecord(ctypes.c_void_p(buf), ctypes.c_size_t(valid),
                                           ctypes.byref(rec)) == 0:
        kind = ctypes.c_uint32.from_address(rec.value).value
        if kind == KIND_DRIVER:
            r = ApiRecord.from_address(rec.value)
            with lock:
                records.append((r.tid, r.cbid, r.start, r.end, r.ret))
    buffers.pop(buf, None)


def now():
    t = ctypes.c_uint64()
    cupti.cuptiGetTimestamp(ctypes.byref(t))
    return t.value


names = {}


def name(cbid):
    if cbid not in names:
        p = ctypes.c_char_p()
        cupti.cuptiGetCallbackName(DOMAIN_DRIVER, cbid, ctypes.byref(p))
        names[cbid] = (p.value or b"?").decode()
    return names[cbid]


@jax.jit
def step(x, w):
    for _ in range(8):
        x = jnp.tanh(x @ w)
    return x, x.mean()


key = jax.random.PRNGKey(0)
x = jax.random.normal(key, (args.size, args.size))
w = jax.random.normal(key, (args.size, args.size)) * 1e-2
x, m = step(x, w)
x.block_until_ready()
float(jax.device_get(m))

assert cupti.cuptiActivityRegisterCallbacks(request, complete) == 0
assert cupti.cuptiActivityEnable(KIND_DRIVER) == 0
main_native = threading.get_native_id()
main_ident = threading.get_ident() & 0xFFFFFFFF
marks = []
for i in range(args.iters):
    t0 = now()
    x, m = step(x, w)
    t1 = now()
    x.block_until_ready()
    t2 = now()
    v = float(jax.device_get(m))
    t3 = now()
    marks.append((t0, t1, t2, t3))
cupti.cuptiActivityFlushAll(1)
cupti.cuptiActivityDisable(KIND_DRIVER)

comm = {}
for t in glob.glob("/proc/self/task/*"):
    try:
        comm[int(os.path.basename(t))] = open(t + "/comm").read().strip()
    except OSError:
        pass

print(f"main thread: native id {main_native}, pthread id (low 32 bits) {main_ident}")
per = collections.defaultdict(collections.Counter)
for tid, cbid, s, e, ret in records:
    per[tid][(name(cbid), ret)] += 1
for tid, c in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
    who = "MAIN" if tid in (main_native, main_ident) else comm.get(tid, "?")
    print(f"thread {tid} ({who}): {sum(c.values())} calls")
    for (n, ret), k in c.most_common():
        print(f"    {k:6d}  {n}{'' if ret == 0 else f' -> {ret}'}")

# One step in time order (the middle one), relative to the step's start.
mid = marks[len(marks) // 2]
lo, hi = mid[0], mid[3]
print(f"\nstep {len(marks) // 2}: dispatch {(mid[1]-mid[0])/1e3:.1f} us, block_until_ready "
      f"{(mid[2]-mid[1])/1e3:.1f} us, device_get {(mid[3]-mid[2])/1e3:.1f} us")
print(f"  python: dispatch ends +{(mid[1]-lo)/1e3:.1f}, block_until_ready ends +{(mid[2]-lo)/1e3:.1f}, "
      f"device_get ends +{(mid[3]-lo)/1e3:.1f} us")
for tid, cbid, s, e, ret in sorted(records, key=lambda r: r[2]):
    if lo - 50_000 <= s <= hi + 50_000:
        who = "MAIN" if tid in (main_native, main_ident) else f"{tid}:{comm.get(tid, '?')}"
        print(f"  +{(s-lo)/1e3:9.1f} .. +{(e-lo)/1e3:9.1f} us  {who:24s} {name(cbid)}"
              f"{'' if ret == 0 else f' -> {ret}'}")
