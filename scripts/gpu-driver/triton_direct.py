"""A Triton kernel launched directly (no torch.compile), with torch.cuda.synchronize() after
each launch: N device syncs."""
import json, os, sys, threading
import torch, triton, triton.language as tl

@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) * 2.0, mask=m)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
x = torch.randn(1 << 24, device="cuda")
y = torch.empty_like(x)
grid = (triton.cdiv(x.numel(), 1024),)
scale[grid](x, y, x.numel(), BLOCK=1024)
torch.cuda.synchronize()  # compile and warm up: not in the account
for _ in range(n):
    scale[grid](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()  # loop-wait
print(json.dumps({"program": "triton", "waits": n, "iters": n, "kind": "device_sync",
                  "tid": threading.get_native_id(), "pid": os.getpid()}))
