# PyTorch tests for the pytest plugin on a GPU host (scripts/gpu-pytest.sh). Each test is
# marked: no host stall allowed. test_sync_free must pass; test_syncs must fail, and the
# failure must name the .item(), nonzero and pageable-copy lines (marked "# L:" below).
# With SYNC_DEBUG=1 the same tests run under torch.cuda.set_sync_debug_mode("error")
# instead (conftest.py), for comparison.
import pytest
import torch


@pytest.mark.syncspy(max_stalls=0)
def test_sync_free():
    x = torch.randn(1024, 1024, device="cuda")
    for _ in range(10):
        x = torch.relu(x @ x) / 1024
    assert x.is_cuda


@pytest.mark.syncspy(max_stalls=0)
def test_syncs():
    x = torch.randn(4096, device="cuda")
    total = x.sum().item()  # L:item
    idx = torch.nonzero(x > 0)  # L:nonzero
    host = torch.randn(1 << 20)
    dev = host.to("cuda", non_blocking=True)  # L:pageable
    assert idx.shape[0] > 0 and dev.is_cuda and total == total


@pytest.mark.syncspy(max_stalls=0)
def test_synchronize_and_event():
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    torch.cuda.synchronize()  # L:synchronize
    e = torch.cuda.Event()
    e.record()
    e.synchronize()  # L:event
    assert y.is_cuda
