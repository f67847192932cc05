"""syncspy for Python: find where your program's CPU waits for its GPU.

``import syncspy`` before torch, jax or cupy loads ``libsyncspy.so`` into the running
interpreter (``RTLD_GLOBAL``, no ``LD_PRELOAD``), so the CUDA libraries those frameworks load
afterwards bind to its hooks. Then::

    with syncspy.watch() as w:          # threads="process" (default) or "current"
        train_step()
    for s in w.stalls:                  # one per (kind, CUDA call, Python line)
        print(s)                        # train.py:42 cudaStreamSynchronize x3

Loaded that way, the library also redirects the ``dlsym`` import slot of every loaded module
to its own ``dlsym`` (and does so again for modules loaded later), as ``syncspy run``'s preload
does: functions looked up by name (``ctypes.CDLL("libcudart.so.13").cudaMemcpy``,
cuda-python, the runtime's own look-ups of the driver) reach the hooks too, and are named by
the runtime function called. ``syncspy.status()["unseen"]`` lists the calls it still cannot
see (a second runtime, slots it could not write, ...); ``watch()`` warns about them, and the
pytest marker fails a test that saw no CUDA call while some are unseen.
``SYNCSPY_IMPORT_PATCH=0`` turns the redirection off (only references the loader binds after
the import reach the hooks then).

A framework imported first has bound its CUDA libraries already: ``import syncspy`` then
warns and loads nothing; run the program under ``syncspy run -- python ...``, or attach to it
(``syncspy attach PID``). Set ``SYNCSPY_IMPORT=0`` to import the package without loading the
library (``syncspy.arm()`` loads it later).

The pytest plugin (``pytest --syncspy``, ``@pytest.mark.syncspy(max_stalls=0)``) lives in
``syncspy_pytest``.
"""

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import warnings

__all__ = [
    "SyncspyError",
    "SyncspyWarning",
    "Stall",
    "Watch",
    "arm",
    "armed",
    "status",
    "watch",
    "library_path",
    "cli_path",
    "KINDS",
    "HOST_STALL_KINDS",
]

#: Every event kind syncspy records, in the ABI's order (``syncspy_abi::Kind::ALL``,
#: docs/contracts.md "Event kinds"). The one list on the Python side: the pytest plugin
#: checks its marker's kinds against it, and cli/tests/kind_lists.rs fails when it and the
#: ABI's differ.
KINDS = (
    "device_sync",
    "stream_sync",
    "event_sync",
    "memcpy_sync",
    "memcpy_pageable",
    "implicit_sync",
    "gpu_idle",
    "poll_wait",
    "host_wait",
)
#: The kinds in which the host thread itself waited (``Kind::is_host_stall``): what
#: ``Watch.stalls`` holds and the pytest marker counts. ``gpu_idle`` (the GPU running
#: nothing) is not one.
HOST_STALL_KINDS = tuple(k for k in KINDS if k != "gpu_idle")

#: Python modules that load a CUDA runtime or driver when imported.
FRAMEWORKS = (
    "torch",
    "jax",
    "jaxlib",
    "cupy",
    "tensorflow",
    "pycuda",
    "numba.cuda",
    "cuda",
    "triton",
    "paddle",
    "mxnet",
)
#: CPython versions whose frames the library reads (older and newer: native frames only).
PYTHON_FRAMES = ((3, 10), (3, 13))

_HERE = os.path.dirname(os.path.abspath(__file__))
_BIN = os.path.join(_HERE, "bin")


class SyncspyError(RuntimeError):
    """syncspy cannot record here; the message says why and what to do instead."""


class SyncspyWarning(UserWarning):
    """syncspy records less than asked (loaded too late, frames unreadable, ...)."""


def library_path():
    """The ``libsyncspy.so`` this package loads: ``SYNCSPY_LIB``, else the wheel's own."""
    return os.environ.get("SYNCSPY_LIB") or os.path.join(_BIN, "libsyncspy.so")


def cli_path():
    """The ``syncspy`` executable that reads segments: the wheel's own, else on PATH."""
    own = os.path.join(_BIN, "syncspy")
    if os.access(own, os.X_OK):
        return own
    import shutil

    return shutil.which("syncspy")


class _PhdrInfo(ctypes.Structure):
    _fields_ = [
        ("addr", ctypes.c_void_p),
        ("name", ctypes.c_char_p),
        ("phdr", ctypes.c_void_p),
        ("phnum", ctypes.c_uint16),
    ]


def _loaded_objects():
    """Paths of the shared objects loaded in this process: as the loader opened them
    (``dl_iterate_phdr``: ``libcudart.so.13`` even where that is a link), then as mapped."""
    paths = []

    def each(info, size, data):
        name = info.contents.name
        if name:
            p = os.fsdecode(name)
            if p not in paths:
                paths.append(p)
        return 0

    try:
        cb = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t, ctypes.c_void_p
        )(each)
        ctypes.CDLL(None).dl_iterate_phdr(cb, None)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    p = parts[5].rstrip("\n")
                    if p not in paths:
                        paths.append(p)
    except OSError:
        pass
    return paths


def _named(paths, *prefixes):
    return [p for p in paths if os.path.basename(p).startswith(prefixes)]


def _cuda_loaded(paths=None):
    """CUDA runtime or driver libraries already in the process."""
    paths = _loaded_objects() if paths is None else paths
    return _named(paths, "libcudart.so", "libcuda.so")


def _frameworks_imported():
    return [m for m in FRAMEWORKS if m in sys.modules]


_lock = threading.Lock()
_lib = None  # the loaded library (ctypes.CDLL)
_how = None  # "import" (loaded by this package), "preload" (already in the process)
_error = None  # why arming failed, once it did
_warned = set()
_redirected = None  # import slots redirected to the hooks (in-process mode), -1: failed
_cover_missing = False  # the loaded library has no syncspy_import_hooks (an older build)


def _off(name):
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, SyncspyWarning, stacklevel=3)


def _too_late_message(frameworks, cuda):
    what = ", ".join(frameworks) if frameworks else ", ".join(os.path.basename(p) for p in cuda)
    return (
        "syncspy: %s %s loaded before syncspy, so %s CUDA calls are bound already and "
        "syncspy cannot see them. Import syncspy first (before %s), or run the program "
        "under syncspy: `syncspy run -- python %s`, or attach to it while it runs: "
        "`syncspy attach %d`."
        % (
            what,
            "was" if len(frameworks or cuda) == 1 else "were",
            "its" if len(frameworks or cuda) == 1 else "their",
            frameworks[0] if frameworks else "the library that loads CUDA",
            " ".join(sys.argv) if sys.argv and sys.argv[0] else "your_script.py",
            os.getpid(),
        )
    )


def arm():
    """Loads ``libsyncspy.so`` into this interpreter (once). Raises ``SyncspyError`` when it
    cannot record: a CUDA framework or runtime loaded first, or the library missing."""
    global _lib, _how, _error
    with _lock:
        if _lib is not None:
            return _lib
        if _error is not None:
            raise SyncspyError(_error)
        paths = _loaded_objects()
        # Already in the process: preloaded (syncspy run, LD_PRELOAD) or attached.
        present = _named(paths, "libsyncspy.so")
        if present:
            _lib = ctypes.CDLL(present[0], mode=os.RTLD_GLOBAL)
            _how = "preload"
            return _lib
        frameworks = _frameworks_imported()
        cuda = _cuda_loaded(paths)
        if frameworks or cuda:
            _error = _too_late_message(frameworks, cuda)
            raise SyncspyError(_error)
        path = library_path()
        if not os.path.isfile(path):
            _error = (
                "syncspy: libsyncspy.so is missing: %s does not exist. %s"
                % (
                    path,
                    "SYNCSPY_LIB names it: point it at libsyncspy.so, or unset it."
                    if os.environ.get("SYNCSPY_LIB")
                    else "The installed package is incomplete: reinstall it "
                    "(pip install --force-reinstall syncspy), or set SYNCSPY_LIB to a "
                    "libsyncspy.so.",
                )
            )
            raise SyncspyError(_error)
        if not sys.platform.startswith("linux"):
            _error = "syncspy: Linux only (this is %s)" % sys.platform
            raise SyncspyError(_error)
        try:
            # RTLD_GLOBAL: libraries loaded later (torch's libcudart users, ctypes
            # libraries linked against the runtime) resolve cuda* to the hooks first.
            _lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
        except OSError as e:
            _error = "syncspy: cannot load %s: %s" % (path, e)
            raise SyncspyError(_error)
        _how = "import"
        _cover()
        lo, hi = PYTHON_FRAMES
        if not (lo <= sys.version_info[:2] <= hi):
            _warn_once(
                "python",
                "syncspy: this is Python %d.%d; syncspy reads the frames of CPython %d.%d to "
                "%d.%d only, so stalls are named by native frames, not Python lines"
                % (sys.version_info[:2] + lo + hi),
            )
        return _lib


def armed():
    """Whether the library is loaded in this process (by ``arm`` or a preload)."""
    return _lib is not None


def _cover():
    """In-process mode (the library loaded by ``arm``): has it redirect the import slots of
    the modules loaded since the last call (``dlsym`` first: look-ups by name then reach the
    hooks). Cheap when nothing was loaded since."""
    global _redirected, _cover_missing
    if _lib is None or _how != "import" or _off("SYNCSPY_IMPORT_PATCH"):
        return
    try:
        f = _lib.syncspy_import_hooks
    except AttributeError:  # SYNCSPY_LIB names an older build
        _cover_missing = True
        return
    f.restype = ctypes.c_int64
    f.argtypes = []
    _redirected = f()


def _import_report():
    """The library's lines on what the in-process mode covers (``covered PATH: ...`` and
    ``not covered PATH: WHY``)."""
    if _lib is None or _how != "import":
        return []
    try:
        f = _lib.syncspy_import_report
    except AttributeError:
        return []
    f.restype = ctypes.c_ssize_t
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    size = 1 << 14
    for _ in range(4):
        buf = ctypes.create_string_buffer(size)
        n = f(buf, size)
        if n >= 0:
            return [l for l in buf.raw[:n].decode(errors="replace").splitlines() if l]
        size = -n + 1
    return []


_LOOKUPS = (
    "CUDA functions looked up by name (dlsym: ctypes.CDLL(...).cudaMemcpy, cuda-python, "
    "and the runtime's own look-ups of the driver)"
)


def _unseen():
    """The CUDA calls this process makes that syncspy cannot see, one line each."""
    if _lib is None:
        return ["every CUDA call: %s" % (_error or "the library is not loaded (syncspy.arm())")]
    out = []
    if _how == "import":
        if _off("SYNCSPY_IMPORT_PATCH"):
            out.append("%s: SYNCSPY_IMPORT_PATCH=0" % _LOOKUPS)
        elif _cover_missing:
            out.append(
                "%s: this libsyncspy.so (%s) cannot redirect them (an older build)"
                % (_LOOKUPS, library_path())
            )
        elif _redirected is not None and _redirected < 0:
            out.append("%s: the redirection failed" % _LOOKUPS)
        out += [l[len("not covered "):] for l in _import_report() if l.startswith("not covered ")]
    return out


def _calls_seen():
    """CUDA calls that reached the hooks in this process so far (None: the library cannot
    say, an older build)."""
    if _lib is None:
        return 0
    try:
        f = _lib.syncspy_calls_seen
    except AttributeError:
        return None
    f.restype = ctypes.c_uint64
    f.argtypes = []
    return f()


def _segment():
    """This process's segment, or None before its first CUDA call."""
    if _lib is None:
        return None
    try:
        f = _lib.syncspy_segment_path
    except AttributeError:  # an older libsyncspy.so (preloaded): find it by name
        return _segment_by_name()
    f.restype = ctypes.c_ssize_t
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    buf = ctypes.create_string_buffer(4096)
    n = f(buf, len(buf))
    if n <= 0:
        return None
    return os.fsdecode(buf.raw[:n])


def _segment_by_name():
    d = os.environ.get("SYNCSPY_DIR") or "/dev/shm"
    try:
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    prefix = "syncspy-%d-%s" % (os.getpid(), start)
    try:
        names = [n for n in os.listdir(d) if n == prefix or n.startswith(prefix + "-")]
    except OSError:
        return None
    return os.path.join(d, sorted(names)[-1]) if names else None


# docs/contracts.md, "The header": live.write_seq and live.events_dropped.
_WRITE_SEQ, _DROPPED = 1160, 1176


def _written(seg):
    """(records claimed, events dropped) of a segment: unchanged, nothing was recorded."""
    if seg is None:
        return None
    try:
        fd = os.open(seg, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            a = os.pread(fd, 8, _WRITE_SEQ)
            b = os.pread(fd, 8, _DROPPED)
        finally:
            os.close(fd)
    except OSError:
        return None
    if len(a) != 8 or len(b) != 8:
        return None
    return (int.from_bytes(a, "little"), int.from_bytes(b, "little"))


def status():
    """What syncspy can see in this process, as a dict (for people and for tests):
    ``unseen`` lists the CUDA calls it cannot see (empty: none known), ``calls_seen`` counts
    the CUDA calls that reached it so far, ``redirected`` the import slots the in-process
    mode sent to the hooks (None when the library was not loaded by this package)."""
    _cover()
    paths = _loaded_objects()
    return {
        "armed": _lib is not None,
        "how": _how,
        "error": _error,
        "library": library_path(),
        "cli": cli_path(),
        "segment": _segment(),
        "calls_seen": _calls_seen(),
        "unseen": _unseen(),
        "redirected": _redirected,
        "cuda_loaded": _cuda_loaded(paths),
        "frameworks": _frameworks_imported(),
        "python": "%d.%d" % sys.version_info[:2],
    }


class Stall:
    """The host stalls of one site in a window: one kind, one CUDA call, one line."""

    __slots__ = (
        "kind",
        "api",
        "count",
        "total_ns",
        "max_ns",
        "bytes",
        "location",
        "file",
        "line",
        "function",
        "python",
        "tids",
    )

    def __init__(self, d):
        for k in self.__slots__:
            setattr(self, k, d.get(k))
        self.python = d.get("python") or []
        self.tids = d.get("tids") or []

    @property
    def where(self):
        """``test_model.py:42`` (the Python line), else the native location."""
        if self.file is not None and self.line:
            return "%s:%d" % (os.path.basename(self.file), self.line)
        return self.location or "(no call site)"

    def __str__(self):
        return "%s %s x%d" % (self.where, self.api, self.count)

    def __repr__(self):
        return "<Stall %s %s total %.3f ms>" % (self, self.kind, self.total_ns / 1e6)

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class Watch:
    """The stalls made between ``__enter__`` and ``__exit__``; see ``watch``."""

    def __init__(self, threads="process"):
        if threads not in ("process", "current"):
            raise ValueError("threads: 'process' or 'current', not %r" % (threads,))
        self.threads = threads
        self.since_ns = None
        self.until_ns = None
        self.tid = None
        #: CUDA calls that reached syncspy while the window was open (any thread): 0 when it
        #: saw none; None when the library cannot say.
        self.calls_seen = None
        #: What syncspy could not see in this process when the window closed (``status()``).
        self.unseen = []
        self._seg = None
        self._written = None
        self._calls = None
        self._result = None

    def __enter__(self):
        arm()
        _cover()
        self.tid = threading.get_native_id()
        self._seg = _segment()
        self._written = _written(self._seg)
        self._calls = _calls_seen()
        self.calls_seen = None
        self.unseen = []
        self.since_ns = time.monotonic_ns()  # CLOCK_MONOTONIC, the records' clock
        self.until_ns = None
        self._result = None
        return self

    def __exit__(self, *exc):
        self.until_ns = time.monotonic_ns()
        _cover()
        now = _calls_seen()
        if now is not None and self._calls is not None:
            # A new segment (a fork child's, a re-attach) starts again from 0.
            self.calls_seen = now - self._calls if now >= self._calls else now
        self.unseen = _unseen()
        for line in self.unseen:
            _warn_once(
                "unseen:" + line,
                "syncspy cannot see some CUDA calls of this process, so watch() misses "
                "their stalls: %s. `syncspy run -- python ...` sees them." % line,
            )
        return False

    def _read(self):
        if self._result is not None:
            return self._result
        if self.since_ns is None:
            raise SyncspyError("syncspy: use the watch in a `with` block first")
        seg = _segment()
        if seg is None or (
            seg == self._seg and self._written is not None and _written(seg) == self._written
        ):
            # No CUDA call reached the hooks in this process yet, or nothing was recorded
            # since the window began (the ring's count did not move): nothing stalled.
            self._result = {"stalls": [], "lost_records": 0, "python": None, "segment": seg}
            return self._result
        cli = cli_path()
        if cli is None:
            raise SyncspyError(
                "syncspy: the syncspy executable is missing from the package (%s): "
                "reinstall it (pip install --force-reinstall syncspy)" % _BIN
            )
        until = self.until_ns if self.until_ns is not None else time.monotonic_ns()
        cmd = [cli, "snapshot", "--segment", seg, "--since-ns", str(self.since_ns)]
        cmd += ["--until-ns", str(until)]
        if self.threads == "current":
            cmd += ["--tid", str(self.tid)]
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)  # the reader needs no hooks
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        if p.returncode != 0:
            raise SyncspyError(
                "syncspy: cannot read this process's stalls: %s"
                % (p.stderr.decode(errors="replace").strip() or "exit %d" % p.returncode)
            )
        self._result = json.loads(p.stdout)
        py = self._result.get("python") or {}
        if py.get("state") == "unsupported":
            _warn_once(
                "frames",
                "syncspy: the frames of this Python (%s) cannot be read: stalls are named by "
                "native frames, not Python lines (CPython 3.10 to 3.13 are read)"
                % (py.get("version") or "%d.%d" % sys.version_info[:2]),
            )
        return self._result

    @property
    def stalls(self):
        """One ``Stall`` per (kind, CUDA call, location), most time first."""
        return [Stall(d) for d in self._read()["stalls"]]

    @property
    def lost_records(self):
        """Records of the process the ring no longer held: when not 0, stalls may be
        missing from this window."""
        return self._read().get("lost_records", 0)

    def count(self, kinds=None):
        """How many stalls, of these kinds (names such as ``stream_sync``) or all."""
        return sum(s.count for s in self.stalls if kinds is None or s.kind in kinds)

    @property
    def total_ns(self):
        return sum(s.total_ns for s in self.stalls)


def watch(threads="process"):
    """A context manager recording the host stalls made inside it, by this process's
    threads (``threads="process"``) or by the calling thread only (``"current"``)."""
    return Watch(threads)


if not _off("SYNCSPY_IMPORT"):
    try:
        arm()
    except SyncspyError as _e:
        warnings.warn(str(_e), SyncspyWarning, stacklevel=2)
