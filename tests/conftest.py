"""GPU tests carry the ``gpu`` marker and skip cleanly where CuPy sees no device."""

import os
import shutil
import tempfile

import pytest

from cupyconv._core.timing import gpu_available

HAS_GPU = gpu_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no GPU: cupy.is_available() is False")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_CHECK_CACHE = None


def pytest_configure(config):
    """One session compiles each kernel module for each target once: the compile check test and
    the demo command's (a subprocess, which inherits the variable) share a result cache that
    lives only as long as the session."""
    global _CHECK_CACHE
    from cupyconv._cli.compile_cache import CACHE_ENV

    if not os.environ.get(CACHE_ENV):
        _CHECK_CACHE = tempfile.mkdtemp(prefix="cupyconv-compile-check-")
        os.environ[CACHE_ENV] = _CHECK_CACHE


def pytest_unconfigure(config):
    if _CHECK_CACHE is not None:
        from cupyconv._cli.compile_cache import CACHE_ENV

        os.environ.pop(CACHE_ENV, None)
        shutil.rmtree(_CHECK_CACHE, ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): one worker per CPU this process may use, at most 8 --
    on a GPU machine every worker holds a CUDA context and its own share of the device memory
    that the large-problem tests allocate."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (no affinity mask on this OS)
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def pytest_report_header(config):
    return f"cupyconv: GPU {'available' if HAS_GPU else 'NOT available: gpu tests skip'}"


# Every prepared call the suite makes is replayed once into poisoned outputs and compared with its
# full path (cupyconv._core.program.verify): a launch path whose device work escapes the
# recording fails the test that runs it.
os.environ.setdefault("CUPYCONV_VERIFY_PREPARED", "1")


@pytest.fixture(autouse=True)
def _fresh_fast_path():
    """Each test plans its calls afresh: a runner prepared by an earlier test (under other
    monkeypatched plans or tuning settings) must not answer for it."""
    from cupyconv._dispatch import callcache

    callcache.clear()
    yield
