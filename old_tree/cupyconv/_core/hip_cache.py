"""cupyconv's own on-disk cache of HIPRTC code objects, for templated modules on ROCm.

Why it exists: CuPy 14.2's ``cupy/cuda/compiler.py`` stores every HIP module in its disk cache,
but ``_compile_with_cache_hip`` reads the cache only ``if not name_expressions`` (it recompiles to
learn the mangled names) and its key does not hold the name expressions.  Every cupyconv module is
a set of template instantiations compiled with ``name_expressions``, so through ``cupy.RawModule``
each one would be compiled again by HIPRTC in every new process (seconds per module).  CuPy's
NVRTC path does not have this gap (it stores the mangled names beside the cubin), so NVIDIA keeps
using CuPy's cache.

What this module holds is the part that needs no GPU: the key, the file layout, the atomic writes
and the checks on reading.  The compile itself is a function the caller passes
(:mod:`cupyconv._core.jit` passes one that runs HIPRTC through CuPy), so the tests drive it with
a fake.

Layout, in :func:`cache_root` (``hip-kernels/`` in cupyconv's user cache directory, the one of
the autotuner's ``tune.json``):

* ``<key>.<digest>.hsaco``: the code object, named by its own sha256 (first 16 hex digits), so
  two processes that store the same key never write different bytes under one name;
* ``<key>.json``: ``{"format", "binary" (the file name above), "sha256", "lowered"}``, where
  ``lowered`` maps each name expression to its mangled (lowered) kernel name, the only thing the
  loader needs beyond the code object.  It is written last: a key with no (valid) record is a
  miss, whatever else lies in the directory.

Both are written to a temporary file in the same directory and moved into place with
``os.replace``, so a reader sees a whole file or none.  A record that cannot be read, is of
another format, does not name every requested name expression, or whose code object is missing
or does not match its sha256 is a miss: the module is compiled again and the record rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cupyconv._core.caches import user_cache_dir

__all__ = ["FORMAT", "CACHE_ENV", "cache_root", "cache_key", "CachedModule", "load", "store",
           "discard", "compile_cached"]

# Bump when the layout or the meaning of a record changes: it is part of every key.
FORMAT = 1
# "$CUPYCONV_HIP_CACHE": a directory to use instead of the default; 0/off/none/no/false: no cache
# (CuPy's own path then compiles every module in every process).
CACHE_ENV = "CUPYCONV_HIP_CACHE"
_OFF = ("0", "off", "none", "no", "false")


def cache_root() -> Path | None:
    """The cache's directory, or None where it is off: ``$CUPYCONV_HIP_CACHE`` (a path, or
    ``off``), else None under ``CUPY_CACHE_IN_MEMORY=1`` (the user asked CuPy to keep kernels off
    the disk), else ``hip-kernels/`` in cupyconv's user cache directory."""
    value = os.environ.get(CACHE_ENV)
    if value is not None and value.strip():
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    if os.environ.get("CUPY_CACHE_IN_MEMORY", "").strip() == "1":
        return None
    return user_cache_dir() / "hip-kernels"


def cache_key(code: str, options, arch: str, compiler: str, name_expressions) -> str:
    """sha256 (hex) of everything that changes the code object or its names: the record format,
    the source text, the complete option list (as given to HIPRTC, CuPy's additions included),
    the target (``gcnArchName`` with its feature suffixes), the compiler's version and the name
    expressions (as a set: their order changes nothing stored)."""
    blob = json.dumps([FORMAT, code, list(options), arch, compiler, sorted(set(name_expressions))])
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class CachedModule:
    """A code object on disk and the lowered name of each of its name expressions."""

    path: Path
    lowered: dict


def _record_path(root: Path, key: str) -> Path:
    return root / f"{key}.json"


def load(root: Path, key: str, name_expressions) -> CachedModule | None:
    """The stored module of ``key``, or None on a miss (no record, or one that fails a check:
    see the module docstring).  Never raises for the cache's contents."""
    try:
        record = json.loads(_record_path(root, key).read_text(encoding="utf-8"))
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            return None
        lowered, binary, digest = record["lowered"], record["binary"], record["sha256"]
        if (not isinstance(lowered, dict) or not isinstance(binary, str)
                or not isinstance(digest, str) or os.path.basename(binary) != binary):
            return None
        if not set(name_expressions) <= set(lowered) or not all(
                isinstance(v, str) and v for v in lowered.values()):
            return None
        path = root / binary
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return None  # truncated or altered code object
        return CachedModule(path, {ne: lowered[ne] for ne in name_expressions})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its directory and ``os.replace``:
    readers see the old file or the whole new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def store(root: Path, key: str, binary: bytes, lowered: dict) -> CachedModule:
    """Write the code object and then its record; return where the code object lies.  Raises
    OSError where the directory cannot be written."""
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(binary).hexdigest()
    name = f"{key}.{digest[:16]}.hsaco"
    _atomic_write(root / name, binary)
    record = {"format": FORMAT, "binary": name, "sha256": digest, "lowered": dict(lowered)}
    _atomic_write(_record_path(root, key), json.dumps(record, indent=1).encode())
    return CachedModule(root / name, dict(lowered))


def discard(root: Path, key: str) -> None:
    """Forget ``key`` (its record and the code object it names), e.g. after its code object
    failed to load: the next :func:`compile_cached` compiles it again."""
    record = _record_path(root, key)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        binary = json.loads(record.read_text(encoding="utf-8"))["binary"]
        if isinstance(binary, str) and os.path.basename(binary) == binary:
            (root / binary).unlink()
    with contextlib.suppress(OSError):
        record.unlink()


def compile_cached(root: Path, key: str, name_expressions, compile_fn) -> tuple[CachedModule, bool]:
    """The module of ``key`` from the cache, or compiled with ``compile_fn() -> (code object
    bytes, {name expression: lowered name})`` and stored.  Returns ``(module, hit)``.  Raises
    OSError where a compiled module cannot be stored (the caller then loads it another way), and
    ValueError where ``compile_fn`` leaves a name expression without a lowered name."""
    cached = load(root, key, name_expressions)
    if cached is not None:
        return cached, True
    binary, lowered = compile_fn()
    missing = [ne for ne in name_expressions if not (lowered or {}).get(ne)]
    if missing:
        raise ValueError(f"the compiler returned no lowered name for {missing}")
    return store(root, key, bytes(binary), {ne: lowered[ne] for ne in name_expressions}), False
