"""pytest plugin of syncspy: host stalls (CPU waiting for the GPU) per test.

Off unless asked:
- ``pytest --syncspy`` loads syncspy before the test modules import torch (each xdist
  worker loads it in its own process), reports every test's stalls at the end, and adds them
  to each test's JUnit properties (``syncspy_stalls``, ``syncspy_stall_ms``,
  ``syncspy_sites``).
- ``@pytest.mark.syncspy(max_stalls=0, kinds=None, threads="process")`` fails a test whose
  code made more stalls than allowed; ``kinds`` limits the count to those kinds (any of
  ``syncspy.HOST_STALL_KINDS``: ``stream_sync``, ``device_sync``, ``poll_wait``,
  ``host_wait``, ...); ``max_stalls`` may also be a dict, a limit per kind. The message names
  each line: ``test_model.py:42 cudaStreamSynchronize x3``. The marker needs syncspy loaded
  before CUDA: ``--syncspy``, or ``import syncspy`` at the top of ``conftest.py``.

A marked test is never passed on nothing seen:
- it fails when syncspy saw no CUDA call while it ran and knows of calls in the process it
  cannot see (``syncspy.status()["unseen"]``: look-ups it cannot redirect, a second runtime,
  ...), naming them;
- it passes with a ``SyncspyWarning`` when syncspy has seen no CUDA call at all in the
  process by the end of the test although a CUDA runtime or driver is loaded (a test that
  only launches kernels makes no call syncspy hooks; one whose calls bypass syncspy looks the
  same).
The session report lists both, and what syncspy cannot see.
"""

import os
import warnings

import pytest

_RESULT = "_syncspy_window"
_SEEN = "_syncspy_process_seen"


def _count(n, one, many):
    """``1 stall``, ``3 stalls``: the count and the word that agrees with it (n may come
    back from an xdist worker as text)."""
    return "%s %s" % (n, one if str(n) == "1" else many)


def pytest_addoption(parser):
    group = parser.getgroup("syncspy", "syncspy: CPU waits for the GPU")
    group.addoption(
        "--syncspy",
        action="store_true",
        default=False,
        help="load syncspy before the tests import CUDA frameworks and report each "
        "test's host stalls (CPU waiting for the GPU)",
    )


def _package():
    """The installed ``syncspy`` package. Importing it loads the library (as ``_arm`` does);
    its warning is not shown here: ``_arm`` reports the same error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import syncspy
    return syncspy


def _arm(config):
    """Loads the library once per process; returns the error, or None."""
    if getattr(config, "_syncspy_error", None) is not None or getattr(
        config, "_syncspy", None
    ):
        return config._syncspy_error
    syncspy = _package()
    try:
        syncspy.arm()
        config._syncspy = syncspy
        config._syncspy_error = None
    except syncspy.SyncspyError as e:
        config._syncspy = None
        config._syncspy_error = str(e)
    return config._syncspy_error


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # Before conftest.py files, which may import torch.
    if getattr(early_config.known_args_namespace, "syncspy", False):
        _arm(early_config)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "syncspy(max_stalls=0, kinds=None, threads='process'): fail the test if its code "
        "made more host stalls (CPU waiting for the GPU) than max_stalls",
    )
    config._syncspy_tests = []
    if config.getoption("syncspy"):
        _arm(config)


def _limits(marker):
    kw = dict(marker.kwargs)
    if marker.args:
        kw.setdefault("max_stalls", marker.args[0])
    limit = kw.get("max_stalls", 0)
    kinds = kw.get("kinds")
    if isinstance(kinds, str):
        kinds = (kinds,)
    # The kinds the installed package knows (its one list, the ABI's), not a copy here.
    syncspy = _package()
    for k in list(kinds or ()) + (list(limit) if isinstance(limit, dict) else []):
        if k not in syncspy.HOST_STALL_KINDS:
            raise pytest.UsageError(
                "syncspy marker: %s %r (kinds: %s)"
                % (
                    "not a host stall, so never counted:"
                    if k in syncspy.KINDS
                    else "unknown kind",
                    k,
                    ", ".join(syncspy.HOST_STALL_KINDS),
                )
            )
    return limit, kinds, kw.get("threads", "process")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("syncspy")
    config = item.config
    if marker is None and not config.getoption("syncspy"):
        yield
        return
    threads = _limits(marker)[2] if marker is not None else "process"
    error = _arm(config)
    if error is not None:
        setattr(item, _RESULT, error)
        yield
        return
    syncspy = config._syncspy
    w = syncspy.watch(threads=threads)
    with warnings.catch_warnings():
        # What the window cannot see is reported with the test (pytest_runtest_makereport).
        warnings.simplefilter("ignore", syncspy.SyncspyWarning)
        w.__enter__()
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", syncspy.SyncspyWarning)
            w.__exit__(None, None, None)
        try:
            w.stalls  # read now: the window's records are in the ring
            setattr(item, _RESULT, w)
        except syncspy.SyncspyError as e:
            setattr(item, _RESULT, str(e))
        if w.calls_seen == 0:
            # Nothing reached syncspy in the window: had it ever, in this process, and is
            # there CUDA to see?
            st = syncspy.status()
            setattr(item, _SEEN, (st["calls_seen"], st["cuda_loaded"]))


def _fmt(stalls):
    return "; ".join(str(s) for s in stalls)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or not hasattr(item, _RESULT):
        return
    rep = outcome.get_result()
    w = getattr(item, _RESULT)
    marker = item.get_closest_marker("syncspy")
    if isinstance(w, str):  # syncspy could not record this test
        rep.user_properties.append(("syncspy_error", w))
        if marker is not None and rep.passed:
            rep.outcome = "failed"
            why = w.split(" Import syncspy first")[0]  # the plugin's own advice follows
            rep.longrepr = (
                "syncspy marker: this test's stalls cannot be counted.\n%s\nRun pytest "
                "with --syncspy, or import syncspy at the top of conftest.py before any "
                "CUDA framework." % why
            )
        return
    stalls = w.stalls
    total = sum(s.count for s in stalls)
    rep.user_properties.append(("syncspy_stalls", total))
    rep.user_properties.append(("syncspy_stall_ms", "%.3f" % (w.total_ns / 1e6)))
    rep.user_properties.append(("syncspy_sites", _fmt(stalls)))
    if w.lost_records:
        rep.user_properties.append(("syncspy_lost_records", w.lost_records))
    if w.calls_seen is not None:
        rep.user_properties.append(("syncspy_calls_seen", w.calls_seen))
    if w.unseen:
        rep.user_properties.append(("syncspy_unseen", "; ".join(w.unseen)))
    process_calls, cuda = getattr(item, _SEEN, (None, []))
    blind = (
        marker is not None
        and rep.passed
        and w.calls_seen == 0
        and not stalls
        and process_calls == 0
        and bool(cuda)
        and not w.unseen  # then the test fails, below
    )
    if blind:
        rep.user_properties.append(("syncspy_saw_nothing", ", ".join(cuda)))
    item.user_properties.extend(p for p in rep.user_properties if p[0].startswith("syncspy"))
    if marker is None or not rep.passed:
        return
    if w.calls_seen == 0 and not stalls and w.unseen:
        rep.outcome = "failed"
        rep.longrepr = (
            "syncspy marker: syncspy saw no CUDA call while this test ran, and it cannot see "
            "these calls of this process, so the test's stalls were not counted:\n%s\n"
            "`syncspy run -- python -m pytest ...` sees them."
            % "\n".join("  " + u for u in w.unseen)
        )
        return
    if w.unseen:
        item.warn(
            item.config._syncspy.SyncspyWarning(
                "syncspy cannot see some CUDA calls of this process, so %s's count may miss "
                "their stalls: %s. `syncspy run -- python -m pytest ...` sees them."
                % (item.name, "; ".join(w.unseen))
            )
        )
    elif blind:
        item.warn(
            item.config._syncspy.SyncspyWarning(
                "syncspy saw no CUDA call while %s ran, nor any before it in this process, "
                "although %s %s loaded: its syncspy marker was checked against nothing. If "
                "the test calls CUDA, those calls bypass syncspy here; `syncspy run -- python "
                "-m pytest ...` sees what `import syncspy` cannot."
                % (
                    item.name,
                    ", ".join(os.path.basename(c) for c in cuda),
                    "is" if len(cuda) == 1 else "are",
                )
            )
        )
    limit, kinds, _ = _limits(marker)
    over = []
    if isinstance(limit, dict):
        for kind, n in limit.items():
            got = [s for s in stalls if s.kind == kind]
            if sum(s.count for s in got) > n:
                over.append((kind, n, got))
    else:
        got = [s for s in stalls if kinds is None or s.kind in kinds]
        if sum(s.count for s in got) > limit:
            over.append((", ".join(kinds) if kinds else "any kind", limit, got))
    if over:
        lines = []
        for kind, n, got in over:
            lines.append(
                "syncspy: %s (%s), at most %d allowed:"
                % (_count(sum(s.count for s in got), "host stall", "host stalls"), kind, n)
            )
            for s in got:
                lines.append(
                    "  %s  (%s, %.3f ms)%s"
                    % (s, s.kind, s.total_ns / 1e6, "  in " + s.function if s.function else "")
                )
        if w.lost_records:
            lines.append(
                "  (%s lost from the ring)"
                % _count(w.lost_records, "record was", "records were")
            )
        rep.outcome = "failed"
        rep.longrepr = "\n".join(lines)


def pytest_runtest_logreport(report):
    # On the controller too (xdist sends each worker's reports with their properties).
    if report.when != "call":
        return
    props = dict((k, v) for k, v in report.user_properties if str(k).startswith("syncspy"))
    if props:
        _tests.append((report.nodeid, props))


_tests = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.getoption("syncspy"):
        return
    tr = terminalreporter
    tr.section("syncspy: host stalls per test (CPU waiting for the GPU)")
    errors = [(n, p["syncspy_error"]) for n, p in _tests if "syncspy_error" in p]
    rows = [(n, p) for n, p in _tests if p.get("syncspy_stalls")]
    rows.sort(key=lambda r: -float(r[1].get("syncspy_stall_ms", 0)))
    for nodeid, p in rows:
        tr.write_line(
            "%s: %s, %s ms: %s"
            % (
                nodeid,
                _count(p["syncspy_stalls"], "stall", "stalls"),
                p["syncspy_stall_ms"],
                p["syncspy_sites"],
            )
        )
    quiet = sum(1 for n, p in _tests if p.get("syncspy_stalls") == 0)
    tr.write_line("%s with stalls, %d without" % (_count(len(rows), "test", "tests"), quiet))
    if errors:
        tr.write_line("not recorded: %s" % errors[0][1])
    nothing = [n for n, p in _tests if "syncspy_saw_nothing" in p]
    if nothing:
        tr.write_line(
            "%s saw no CUDA call (none in the process yet, though CUDA is loaded), checked "
            "against nothing: %s" % (_count(len(nothing), "marked test", "marked tests"),
                                     ", ".join(nothing))
        )
    unseen = []
    for n, p in _tests:
        for u in str(p.get("syncspy_unseen", "")).split("; "):
            if u and u not in unseen:
                unseen.append(u)
    for u in unseen:
        tr.write_line("syncspy cannot see: %s" % u)
    own = getattr(config, "_syncspy", None)
    xdist = config.pluginmanager.getplugin("dsession") is not None
    if own is not None and not xdist and _tests and not rows:
        st = own.status()
        if not st["cuda_loaded"] and not st["segment"]:
            tr.write_line(
                "no CUDA runtime was loaded in this process: nothing could stall "
                "(with xdist, each worker records its own)"
            )
