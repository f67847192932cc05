"""A torch.compile loop with .item() each step: N stream syncs by the program's account."""
import json, os, sys, threading
import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
f = torch.compile(lambda x: torch.tanh(x @ x).mean())
x = torch.randn(2048, 2048, device="cuda")
f(x).item()  # compile and warm up: not in the account
for _ in range(n):
    f(x).item()  # loop-wait
print(json.dumps({"program": "compile", "waits": n, "iters": n, "kind": "stream_sync",
                  "tid": threading.get_native_id(), "pid": os.getpid()}))
