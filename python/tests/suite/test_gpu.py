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


# Every host-stall kind of the installed package is a marker kind (issue 34: the plugin's own
# list had no poll_wait or host_wait: "unknown kind"). A stream_sync is neither.
@pytest.mark.syncspy(max_stalls=0, kinds=["host_wait"])
def test_host_wait_kind():
    lib.pc_sync()


@pytest.mark.syncspy(max_stalls=0, kinds=["poll_wait"])
def test_poll_wait_kind():
    lib.pc_sync()


@pytest.mark.syncspy(max_stalls={"poll_wait": 0, "host_wait": 0, "stream_sync": 1})
def test_new_kinds_in_a_dict():
    lib.pc_sync()


def test_unmarked_reported():
    lib.pc_sync()  # L:unmarked


@pytest.mark.parametrize("i", range(4))
def test_many(i):
    lib.pc_sync()
