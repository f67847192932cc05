# The frames of the thread syncspy reads change under it: a Python thread recurses to random
# depths (its frames spill over data-stack chunks that the interpreter frees on the way back)
# and releases the GIL at the bottom (time.sleep(0)), so it is a waiting candidate for a
# moment, while the main thread runs Python and a C worker syncs thousands of times. The
# process must finish normally; whatever waiting stacks were kept must be this file's.
import ctypes
import random
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
go = ctypes.c_int.in_dll(lib, "pc_go")
done = ctypes.c_int.in_dll(lib, "pc_done")
stop = False


def down(n):
    if n == 0:
        time.sleep(0)
        return 0
    return down(n - 1) + 1


def churn():
    r = random.Random(7)
    while not stop:
        down(r.randrange(1, 400))


t = threading.Thread(target=churn)
t.start()
lib.pc_worker_start(int(sys.argv[2]), 1)
go.value = 1
while not done.value:
    pass
lib.pc_worker_wait()
stop = True
t.join()
print("ok")
