"""Every cache of the package, owned in one place and cleared by one call.

Plans, choices, compiled modules and prepared calls are memoized per problem.  Each cache
registers here when its module is imported (:func:`memoized` for function results,
:func:`register` for a cache with its own ``clear``), and :func:`clear_caches` empties them all:
after changing tuning by hand, in tests, or to give memory back.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable

_clearers: list[Callable[[], None]] = []


def memoized(maxsize: int | None = 4096):
    """``functools.lru_cache(maxsize)`` whose entries :func:`clear_caches` drops."""

    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _clearers.append(cached.cache_clear)
        return cached

    return wrap


def register(clear: Callable[[], None]) -> Callable[[], None]:
    """Register the ``clear`` function of a cache kept elsewhere (a dict, a module table)."""
    _clearers.append(clear)
    return clear


def clear_caches() -> None:
    """Empty every cache of the package: prepared calls, algorithm choices, GEMM and kernel
    plans, compiled modules held in memory (CuPy's on-disk kernel cache and the tuning file are
    left alone).  The next call of each problem plans (and loads its kernels) again."""
    for clear in _clearers:
        clear()


def user_cache_dir() -> Path:
    """cupyconv's directory for what it keeps on disk (the autotuner's ``tune.json``, the compile
    check's results, HIP code objects): ``$CUPYCONV_CACHE_DIR``, else the platform's user cache
    directory."""
    if os.environ.get("CUPYCONV_CACHE_DIR"):
        return Path(os.environ["CUPYCONV_CACHE_DIR"]).expanduser()
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "cupyconv"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cupyconv"
