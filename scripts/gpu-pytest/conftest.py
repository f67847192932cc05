# SYNC_DEBUG=1: each test runs under torch.cuda.set_sync_debug_mode("error"), PyTorch's own
# way to fail a test that synchronizes, to compare with the syncspy plugin.
import os

import pytest

if os.environ.get("SYNC_DEBUG") == "1":

    @pytest.fixture(autouse=True)
    def _sync_debug():
        import torch

        torch.cuda.init()
        torch.cuda.set_sync_debug_mode("error")
        yield
        torch.cuda.set_sync_debug_mode(0)
