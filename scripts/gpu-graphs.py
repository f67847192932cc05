"""A sync inside CUDA graph capture (issue 26): `.item()` in a `torch.cuda.graph` region
fails the capture. syncspy's report should flag the call at its line
(`sites[].capture_failures`, the capture advice). Prints what PyTorch said.

    python3 scripts/gpu-graphs.py
"""
import torch

x = torch.randn(1 << 20, device="cuda")
g = torch.cuda.CUDAGraph()
torch.cuda.synchronize()
try:
    with torch.cuda.graph(g):
        y = x * 2
        v = y.sum().item()  # L:capture-item
    print("captured", flush=True)
except RuntimeError as e:
    print("capture failed:", str(e).splitlines()[0], flush=True)
torch.cuda.synchronize()
