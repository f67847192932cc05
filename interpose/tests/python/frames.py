# Calls the CUDA runtime (through pycaller, see pycaller.c) from known lines. Each line that
# syncs carries a `# L:<name>` marker; the test finds the line numbers by these markers.
import ctypes
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])


def loop():
    for _ in range(3):
        lib.pc_sync()  # L:loop_a
        lib.pc_sync()  # L:loop_b


def inner():
    lib.pc_sync()  # L:inner


def middle():
    inner()  # L:middle


def outer():
    middle()  # L:outer


def gen():
    for _ in range(2):
        lib.pc_sync()  # L:gen
        yield 1


def consume():
    for _ in gen():  # L:consume
        pass


def worker():
    lib.pc_sync()  # L:worker


class Model:
    def step(self):
        lib.pc_sync()  # L:method


def main():
    loop()  # L:main_loop
    outer()  # L:main_outer
    consume()  # L:main_consume
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    Model().step()  # L:main_method
    lib.pc_c_thread(2)  # L:main_cthread


main()  # L:module
