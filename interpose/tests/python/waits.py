# Stalls made on a C worker thread (no Python frames) while a Python thread waits for them,
# blocked in a ctypes call (which releases the GIL); see pycaller.c's pc_worker_*. Lines that
# wait carry a `# W:<name>` marker; the test finds the line numbers by these markers.
import ctypes
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])
started = ctypes.c_int.in_dll(lib, "pc_started")
go = ctypes.c_int.in_dll(lib, "pc_go")
done = ctypes.c_int.in_dll(lib, "pc_done")


def step():
    lib.pc_worker_run(3)  # W:wait_a


def fetch():
    lib.pc_worker_run(2)  # W:wait_b


def busy():
    # The main thread keeps the GIL, running Python, while the worker syncs: it waits for
    # nothing, so these stalls have no waiting line.
    lib.pc_worker_start(4, 1)
    go.value = 1
    while not done.value:
        pass
    lib.pc_worker_wait()


def in_thread():
    lib.pc_worker_run_gated(2)  # W:thread_wait


def other_thread():
    # A non-main Python thread waits while the main thread runs Python (holding the GIL).
    t = threading.Thread(target=in_thread)
    t.start()
    while not started.value:
        pass
    go.value = 1
    while not done.value:
        pass
    t.join()


def deep(n):
    # A waiting stack deeper than the 32 frames a site keeps.
    if n == 0:
        return lib.pc_worker_run(1)  # W:deep_wait
    return deep(n - 1)  # W:deep_rec


def main():
    step()  # W:main_step
    fetch()  # W:main_fetch
    busy()
    other_thread()
    deep(60)  # W:main_deep


main()  # W:module
