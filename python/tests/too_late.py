# The CUDA runtime is loaded before syncspy: `import syncspy` warns (pointing at syncspy run
# and syncspy attach) and loads nothing; watch() raises the same explanation.
# Usage: python too_late.py LIBPYCALLER
import ctypes
import sys
import warnings

lib = ctypes.CDLL(sys.argv[1])  # brings libcudart.so.13 in
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import syncspy
msgs = [str(c.message) for c in caught if issubclass(c.category, syncspy.SyncspyWarning)]
assert len(msgs) == 1, msgs
assert "libcudart.so.13 was loaded before syncspy" in msgs[0], msgs[0]
assert "syncspy run -- python" in msgs[0] and "syncspy attach" in msgs[0], msgs[0]
assert not syncspy.armed()
try:
    with syncspy.watch():
        lib.pc_sync()
except syncspy.SyncspyError as e:
    assert "loaded before syncspy" in str(e), e
else:
    raise AssertionError("watch() without the library must raise")
print("too_late: ok")
