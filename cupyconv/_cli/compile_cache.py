"""The compile check's result cache: a compile that succeeded is recorded on disk under a hash of
everything that changes its outcome (compiler and its version, target, options, source,
instantiations), so a repeated check compiles only what changed.

The cache lives in ``$CUPYCONV_COMPILE_CHECK_CACHE`` if set (``0``/``off``: no cache), else in
``compile-check/`` under cupyconv's user cache directory (``~/.cache/cupyconv``).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import subprocess
from pathlib import Path

from cupyconv._cli import compilers
from cupyconv._core.caches import memoized
from cupyconv._core.jit import arch_options
from cupyconv._core.kernels import KernelModule
from cupyconv.jit import COMPILE_OPTIONS

# Where successful compiles are recorded (see the module docstring); "0"/"off"/"none": nowhere.
CACHE_ENV = "CUPYCONV_COMPILE_CHECK_CACHE"
_CACHE_OFF = ("0", "off", "none", "no", "false")


@memoized(None)
def _compiler_version(vendor: str, arch: str = "") -> str:
    """The compiler's version, for the result cache's key ("?" where it cannot be asked)."""
    try:
        if vendor == "nvidia":
            from cupy.cuda import nvrtc

            return "nvrtc %d.%d" % nvrtc.getVersion()
        if vendor == "clang":
            exe = compilers.clang_for(arch)
            if exe is None:
                return "?"
            return subprocess.run([exe, "--version"], capture_output=True,
                                  text=True).stdout.splitlines()[0]
        lib = compilers._load_hiprtc()
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"hiprtc {major.value}.{minor.value}"
    except Exception:
        return "?"


def cache_root() -> Path | None:
    """The result cache's directory: ``$CUPYCONV_COMPILE_CHECK_CACHE`` (``0``/``off``/``none``
    or empty: no cache), else ``compile-check/`` in cupyconv's user cache directory (the one of
    the autotuner's ``tune.json``)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _CACHE_OFF + ("",) else Path(value).expanduser()
    from cupyconv._core.caches import user_cache_dir

    return user_cache_dir() / "compile-check"


def cache_key(vendor: str, arch: str, code: str, name_expressions) -> str:
    """sha256 of everything that changes a compile's outcome: compiler and version, target,
    options (the target's included), source text and instantiations."""
    key = json.dumps([vendor, _compiler_version(vendor, arch), arch,
                      list(COMPILE_OPTIONS + arch_options(arch)), code, list(name_expressions)])
    return hashlib.sha256(key.encode()).hexdigest()


def _cached_ok(module: KernelModule, vendor: str, arch: str) -> Path | None:
    """Where the result cache records that this exact compile succeeded (None: no cache)."""
    root = cache_root()
    if root is None:
        return None
    return root / (cache_key(vendor, arch, module.code, module.name_expressions) + ".ok")


def _record_ok(marker: Path | None) -> None:
    if marker is not None:
        with contextlib.suppress(OSError):
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

