# A test suite on the simulated runtime (through libpycaller, a ctypes library linked against
# libcudart.so.13): run with `pytest --syncspy`. test_over_budget must fail, naming its line.
import ctypes
import os

import pytest

lib = ctypes.CDLL(os.environ["PYCALLER"])


@pytest.mark.syncspy(max_stalls=0)
def test_clean():
    assert 1 + 1 == 2


@pytest.mark.syncspy(max_stalls=0, kinds=["stream_sync"])
def test_over_budget():
    for _ in range(2):
        lib.pc_sync()  # L:over


@pytest.mark.syncspy(max_stalls={"stream_sync": 3, "device_sync": 0})
def test_within_budget():
    for _ in range(3):
        lib.pc_sync()  # L:within


@pytest.mark.syncspy(max_stalls=0, kinds="event_sync")
def test_other_kind_allowed():
    lib.pc_sync()


def test_unmarked_reported():
    lib.pc_sync()  # L:unmarked


@pytest.mark.parametrize("i", range(4))
def test_many(i):
    lib.pc_sync()
