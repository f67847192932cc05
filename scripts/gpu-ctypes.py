"""The CUDA runtime called through ctypes on a GPU host (issue 28): the program loads
libcudart itself and looks its functions up on that handle, as NVIDIA's cuda-python does. It
makes 3 blocking device-to-host `cudaMemcpy` calls and 2 `cudaStreamSynchronize` calls (each at
its own line) and prints its own count; the report should name those runtime functions at
those lines (before: the driver calls behind them). Also tries cuda-python when installed.

    syncspy run --report r.json -- python3 scripts/gpu-ctypes.py
"""
import ctypes
import glob
import json
import os
import sys

cands = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia",
                               "cu*", "lib", "libcudart.so.1*"))
cands += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia",
                                "cuda_runtime", "lib", "libcudart.so.1*"))
rt = ctypes.CDLL(cands[0] if cands else "libcudart.so.13")
p = ctypes.c_void_p()
n = 1 << 24
assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
buf = ctypes.create_string_buffer(n)
for _ in range(3):
    assert rt.cudaMemcpy(buf, p, ctypes.c_size_t(n), 2) == 0  # L:memcpy
for _ in range(2):
    assert rt.cudaStreamSynchronize(None) == 0  # L:sync
truth = {"library": cands[0] if cands else "libcudart.so.13", "cudaMemcpy": 3,
         "cudaStreamSynchronize": 2}
try:
    from cuda.bindings import runtime as cr  # cuda-python, when installed
    for _ in range(4):
        (err,) = cr.cudaStreamSynchronize(0)  # L:cuda-python
    truth["cuda_python_syncs"] = 4
except ImportError:
    truth["cuda_python_syncs"] = None
print(json.dumps(truth), flush=True)
