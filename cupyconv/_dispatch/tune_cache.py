"""The tuning cache file: the autotuner's winners (:mod:`cupyconv._dispatch.tune`), one JSON file
under the user cache directory.

The file (``tune.json``; directory ``$CUPYCONV_CACHE_DIR``, else ``$XDG_CACHE_HOME/cupyconv`` or
``~/.cache/cupyconv``) carries the package version and a schema number.  One function,
``parse_cache``, reads it and checks every field that is used: a file from another version, or one
that is not UTF-8 JSON of the expected shape (any depth, size or number spelling), is ignored with a
``RuntimeWarning`` naming it and rebuilt on the next write; an entry of the wrong shape is dropped
alone, with a warning.  Reading the cache never raises.  Writers
re-read and merge under a lock file (POSIX ``flock``, where available) and replace the file
atomically (temporary file + ``os.replace``), so concurrent processes neither corrupt it nor, with
the lock, lose each other's entries.  An unwritable cache is a warning, never an error.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import warnings
from pathlib import Path

from cupyconv._core.caches import user_cache_dir

SCHEMA = 1
FILE_NAME = "tune.json"


def _package_version() -> str:
    from cupyconv._core.version import __version__

    return __version__


# ---------------------------------------------------------------------------------- cache file
def cache_dir() -> Path:
    """Where the tuning cache lives: cupyconv's user cache directory."""
    return user_cache_dir()


def cache_path() -> Path:
    return cache_dir() / FILE_NAME


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive lock on ``path`` + ".lock" where the OS has ``flock``; else no lock (the
    atomic replace still keeps the file whole; a concurrent entry may then be lost)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(str(path) + ".lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class TuneCache:
    """The tuning cache file: ``{"schema", "version", "entries": {key: entry}}``."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else cache_path()

    def _warn(self, what: str) -> None:
        warnings.warn(f"cupyconv: the tuning cache {self.path} {what}", RuntimeWarning,
                      stacklevel=4)

    def _read(self) -> dict:
        """The valid entries of the file; {} (with a warning) when it is missing, unreadable,
        corrupt or stale.  Never raises: see :func:`parse_cache`."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as e:
            self._warn(f"cannot be read ({e}); tuning without it")
            return {}
        entries, problem = parse_cache(raw)
        if problem is not None:
            self._warn(f"{problem}; " + ("those entries are dropped and the file is "
                                         "rewritten on the next write" if entries else
                                         "it will be rebuilt"))
        return entries
    def entries(self) -> dict:
        return self._read()

    def get(self, key: str) -> dict | None:
        return self._read().get(key)

    def put(self, key: str, entry: dict) -> bool:
        """Merge ``entry`` into the file; False (with a warning) when it cannot be written."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _file_lock(self.path):
                entries = self._read()
                entries[key] = entry
                data = {"schema": SCHEMA, "version": _package_version(), "entries": entries}
                fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp",
                                           dir=self.path.parent)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        json.dump(data, f, indent=1, sort_keys=True, allow_nan=False)
                    os.replace(tmp, self.path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
            return True
        except (OSError, ValueError) as e:  # ValueError: an entry JSON cannot hold (NaN)
            warnings.warn(f"cupyconv: cannot write the tuning cache {self.path} ({e}); the tuned "
                          f"choice is kept for this process only", RuntimeWarning, stacklevel=2)
            return False


# ---------------------------------------------------------------------------------- reading
# The largest cache file read (a file of thousands of problems is well under 1 MiB; anything
# bigger is not ours, and reading it whole could exhaust memory).
MAX_FILE_BYTES = 16 << 20
_MAX_TILE_RANK = 8
_MAX_SMALL_INT = 1 << 16  # tile extents and split counts are small
_ENTRY_FIELDS = {"best", "ms", "timings", "date"}


def _small_int(v) -> bool:
    return type(v) is int and 1 <= v <= _MAX_SMALL_INT


def _time_ms(v) -> bool:
    """A measured time: a finite, non-negative number (not a bool; JSON's NaN/Infinity and
    numbers like 1e999, which parse to inf, are not times)."""
    return type(v) in (int, float) and math.isfinite(v) and v >= 0


def entry_problem(entry) -> str | None:
    """Why ``entry`` is not a valid cache entry, or None when it is.  The schema (every field
    that :func:`autotune` reads, with its type)::

        {"best": {"algorithm": str, "tile": [int 1..2**16, ...] | null, "splits": int | null},
         "ms": finite float >= 0, "timings": {str: finite float >= 0 | null} (optional),
         "date": str (optional)}
    """
    if not isinstance(entry, dict):
        return f"is a {type(entry).__name__}, not an object"
    unknown = set(entry) - _ENTRY_FIELDS
    if unknown:
        return f"has unknown fields {sorted(unknown)[:3]}"
    best = entry.get("best")
    if not isinstance(best, dict):
        return "'best' is not an object"
    if set(best) - {"algorithm", "tile", "splits"}:
        return "'best' has unknown fields"
    if not isinstance(best.get("algorithm"), str) or not best["algorithm"]:
        return "'best.algorithm' is not a string"
    tile = best.get("tile")
    if tile is not None and not (isinstance(tile, list) and 1 <= len(tile) <= _MAX_TILE_RANK
                                 and all(_small_int(t) for t in tile)):
        return "'best.tile' is not null or a list of small positive integers"
    splits = best.get("splits")
    if splits is not None and not _small_int(splits):
        return "'best.splits' is not null or a small positive integer"
    if not _time_ms(entry.get("ms")):
        return "'ms' is not a finite non-negative number"
    timings = entry.get("timings", {})
    if not isinstance(timings, dict) or not all(t is None or _time_ms(t)
                                                for t in timings.values()):
        return "'timings' is not an object of finite non-negative numbers or nulls"
    if not isinstance(entry.get("date", ""), str):
        return "'date' is not a string"
    return None


def _short(v, n: int = 40) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def parse_cache(raw: bytes) -> tuple[dict, str | None]:
    """The one reader of a cache file's bytes: ``(valid entries, problem)``, where ``problem``
    says (for a warning) why the file or some of its entries were rejected, None when all is
    well.  It checks the encoding (UTF-8), the size, the JSON (deep nesting included: the
    parser's RecursionError is caught), the top level (an object with this ``schema`` and package
    ``version`` and an ``entries`` object) and every entry (:func:`entry_problem`).  A bad file
    gives no entries; a bad entry is dropped alone.  It never raises."""
    if len(raw) > MAX_FILE_BYTES:
        return {}, f"is larger than {MAX_FILE_BYTES >> 20} MiB (corrupt)"
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return {}, f"is corrupt (not UTF-8: {e.reason} at byte {e.start})"
    except ValueError as e:  # json.JSONDecodeError, and integers longer than Python converts
        return {}, f"is corrupt ({_short(str(e), 80)})"
    except RecursionError:
        return {}, "is corrupt (JSON nested too deep)"
    if not isinstance(data, dict):
        return {}, f"is corrupt (the top level is a {type(data).__name__}, not an object)"
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}, "is corrupt ('entries' is missing or not an object)"
    if data.get("schema") != SCHEMA or data.get("version") != _package_version():
        return {}, (f"was written by cupyconv {_short(data.get('version'))} (schema "
                    f"{_short(data.get('schema'))}), this is {_package_version()} (schema "
                    f"{SCHEMA}); it is stale")
    good, bad = {}, []
    for key, entry in entries.items():
        problem = entry_problem(entry)
        if problem is None:
            good[key] = entry
        else:
            bad.append(f"{_short(key)} {problem}")
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        return good, f"has corrupt entries (entry {bad[0]}{more})"
    return good, None
