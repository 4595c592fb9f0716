"""GPU tests carry the ``gpu`` marker and skip cleanly where CuPy sees no device."""

import pytest

from cupyconv._timing import gpu_available

HAS_GPU = gpu_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no GPU: cupy.is_available() is False")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return f"cupyconv: GPU {'available' if HAS_GPU else 'NOT available: gpu tests skip'}"


@pytest.fixture(autouse=True)
def _fresh_fast_path():
    """Each test plans its calls afresh: a runner prepared by an earlier test (under other
    monkeypatched plans or tuning settings) must not answer for it."""
    from cupyconv import _fastpath

    _fastpath.clear()
    yield
