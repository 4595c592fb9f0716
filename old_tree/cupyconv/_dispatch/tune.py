"""Autotuning: time the candidate algorithms and tile configurations of a problem once, keep the
winner in a JSON file under the user cache directory.

The heuristic choice (``_dispatch.forward.heuristic_choice``) stays the default.  ``cupyconv.tune(...)`` tunes one
problem explicitly; ``CUPYCONV_AUTOTUNE=1`` makes ``method="auto"`` look every problem up in the
cache and tune it on first use.  A cache entry is keyed by device name, compute capability and the
geometry (which holds dtype and layout), so a file shared between machines or GPUs never hands one
device's winner to another.

The file (``tune.json``; directory ``$CUPYCONV_CACHE_DIR``, else ``$XDG_CACHE_HOME/cupyconv`` or
``~/.cache/cupyconv``) carries the package version and a schema number.  One function,
``parse_cache``, reads it and checks every field that is used: a file from another version, or one
that is not UTF-8 JSON of the expected shape (any depth, size or number spelling), is ignored with a
``RuntimeWarning`` naming it and rebuilt on the next write; an entry of the wrong shape is dropped
alone, with a warning.  Reading the cache never raises.  Writers
re-read and merge under a lock file (POSIX ``flock``, where available) and replace the file
atomically (temporary file + ``os.replace``), so concurrent processes neither corrupt it nor, with
the lock, lose each other's entries.  Tuning never makes a call fail: an unwritable cache is a
warning, a candidate that fails is skipped, and with no candidate left the heuristic choice runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from cupyconv._core.caches import user_cache_dir
from cupyconv._core.dtypes import dtype_name
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DTYPES

SCHEMA = 1
FILE_NAME = "tune.json"
SPLIT_CHOICES = (1, 2, 4, 8)


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


# ---------------------------------------------------------------------------------- keys
def device_info(device_id: int) -> tuple[str, str]:
    """(name, compute capability) of a CuPy device, e.g. ("NVIDIA H200", "90")."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return name, str(cupy.cuda.Device(device_id).compute_capability)


def problem_key(device: tuple[str, str], op: str, geom: ConvGeometry) -> str:
    """A readable, stable key: device | compute capability | op | dtype | layout | geometry."""
    g = asdict(geom)
    shape = ";".join(f"{f}={g[f]}" for f in ("batch", "in_channels", "out_channels", "groups",
                                               "spatial", "kernel", "stride", "dilation",
                                               "pad_lo", "pad_hi"))
    dtype = str(geom.dtype) + ("+tf32" if geom.precision == "tf32" else "")
    return "|".join((device[0], f"sm_{device[1]}", op, dtype, geom.layout, shape.replace(" ", "")))


# ---------------------------------------------------------------------------------- candidates
@dataclass(frozen=True)
class Candidate:
    """One way to run a problem: an algorithm, and for tiled-GEMM ones a forced tile and split."""

    algorithm: str
    tile: tuple[int, ...] | None = None
    splits: int | None = None

    @property
    def label(self) -> str:
        if self.tile is None:
            return self.algorithm
        return f"{self.algorithm} tile {'x'.join(map(str, self.tile[:3]))} split {self.splits}"

    def plan(self):
        from cupyconv._gemm.launch import GemmPlan

        return None if self.tile is None else GemmPlan(tuple(self.tile), self.splits, math.nan)

    def to_json(self) -> dict:
        return {"algorithm": self.algorithm, "tile": list(self.tile) if self.tile else None,
                "splits": self.splits}

    @classmethod
    def from_json(cls, d: dict) -> "Candidate":
        tile = d.get("tile")
        return cls(str(d["algorithm"]), tuple(int(t) for t in tile) if tile else None,
                   int(d["splits"]) if d.get("splits") is not None else None)


def forward_candidates(geom: ConvGeometry) -> list[Candidate]:
    """Every applicable forward algorithm; tiled-GEMM ones once per tile of the dtype and split-K
    count (splits only while each part keeps at least 4 k-slices, as plan_gemm requires)."""
    import cupy

    from cupyconv._core.kernels import gemm_tiles
    from cupyconv._core.precision import gemm_math
    from cupyconv._dispatch.forward import FORWARD
    from cupyconv._gemm.forward import gemm_launch_shape

    try:
        device_id = cupy.cuda.Device().id
    except cupy.cuda.runtime.CUDARuntimeError:  # no device: list the SIMT tiles
        device_id = None
    main_loop = 0 if device_id is None else gemm_math(geom.dtype, geom.precision, device_id)
    out = []
    for name, algo in FORWARD.items():
        if not algo.applicable(geom):
            continue
        if not algo.tiled:
            out.append(Candidate(name))
            continue
        k = gemm_launch_shape(geom, name, device_id)[1][2]  # (after the implicit GEMM's group merge)
        for tile in gemm_tiles(geom.dtype, main_loop):
            slices = math.ceil(k / tile[2])
            out += [Candidate(name, tile, s) for s in SPLIT_CHOICES if s == 1 or slices >= 4 * s]
    return out


# ---------------------------------------------------------------------------------- tuning
@dataclass
class TuneResult:
    """The winner of one problem, its time, every candidate's time (ms; None: failed), and
    whether it came from the cache file."""

    key: str
    best: Candidate
    ms: float
    timings: dict
    cached: bool


def autotune(key: str, candidates: Sequence[Candidate], measure: Callable[[Candidate], float],
             cache: TuneCache | None = None, *, retune: bool = False,
             progress: Callable[[int, int, str], None] | None = None) -> TuneResult | None:
    """The fastest of ``candidates`` by ``measure`` (ms), from ``cache`` unless ``retune``; the
    winner is written back.  A candidate whose measure raises is skipped; None if none ran.
    An entry naming a candidate outside ``candidates`` (stale) is re-tuned."""
    cache = cache if cache is not None else TuneCache()
    if not retune:
        hit = cache.get(key)
        if hit is not None:
            try:
                best = Candidate.from_json(hit["best"])
                if best in candidates:
                    return TuneResult(key, best, float(hit["ms"]), hit.get("timings", {}), True)
            except (KeyError, TypeError, ValueError):
                pass  # a malformed entry is tuned again and overwritten
    timings, best, best_ms = {}, None, math.inf
    for i, cand in enumerate(candidates, 1):
        if progress is not None:
            progress(i, len(candidates), cand.label)
        try:
            ms = float(measure(cand))
            if not _time_ms(ms):
                raise RuntimeError(f"measured {ms} ms")
        except Exception as e:  # a candidate that fails to compile or run is not a winner
            timings[cand.label] = None
            warnings.warn(f"cupyconv: tuning candidate {cand.label} failed ({e!r})", RuntimeWarning,
                          stacklevel=2)
            continue
        timings[cand.label] = ms
        if ms < best_ms:
            best, best_ms = cand, ms
    if best is None:
        return None
    cache.put(key, {"best": best.to_json(), "ms": best_ms, "timings": timings,
                    "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    return TuneResult(key, best, best_ms, timings, False)


def _default_timer(fn) -> float:
    from cupyconv._core.timing import time_gpu

    return time_gpu(fn, warmup=2, repeat=5)


def tune_geometry(geom: ConvGeometry, *, device_id: int | None = None, timer=None,
                  cache: TuneCache | None = None, retune: bool = False,
                  progress=None) -> TuneResult | None:
    """Tune the forward problem ``geom`` on the GPU with inputs of its own (random, so the user's
    arrays are never touched).  Each candidate's result is checked against the direct kernel's
    first: a configuration that computes wrong numbers is never a winner."""
    import cupy

    from cupyconv._core.verify import AGREEMENT
    from cupyconv._dispatch.forward import FORWARD

    if geom.dtype is None:
        raise ValueError("tuning needs a geometry with a dtype")
    device_id = cupy.cuda.Device().id if device_id is None else device_id
    timer = timer or _default_timer
    key = problem_key(device_info(device_id), "fwd", geom)
    with cupy.cuda.Device(device_id):
        rng = cupy.random.default_rng(0)
        x = rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32).astype(geom.dtype)
        w = rng.uniform(-1, 1, geom.weight_shape, dtype=cupy.float32).astype(geom.dtype)
        y = cupy.empty(geom.output_shape, dtype=geom.dtype)
        expect = cupy.empty_like(y)
        FORWARD["direct"].run(geom, x, w, None, expect)
        norm = float(cupy.linalg.norm(expect.astype(cupy.float64))) or 1.0
        # TF32 candidates round their inputs: judged as the 2-byte types are
        bound = AGREEMENT["float16"] if geom.precision == "tf32" else AGREEMENT[geom.dtype]

        def measure(cand: Candidate) -> float:
            algo = FORWARD[cand.algorithm].with_plan(cand.plan())
            y.fill(math.nan)
            algo.run(geom, x, w, None, y)
            err = float(cupy.linalg.norm((y - expect).astype(cupy.float64))) / norm
            if not err <= bound:
                raise RuntimeError(f"wrong result: relative error {err:.1e}")
            return timer(lambda: algo.run(geom, x, w, None, y))

        return autotune(key, forward_candidates(geom), measure, cache, retune=retune,
                        progress=progress)


def tuned_algorithm(geom: ConvGeometry, device_id: int):
    """The ``Algorithm`` (with its plan forced) that the tuning cache names for ``geom``, tuning
    it first when missing; the heuristic choice when tuning is impossible."""
    from cupyconv._dispatch.forward import FORWARD, heuristic_choice

    try:
        result = tune_geometry(geom, device_id=device_id)
    except Exception as e:  # e.g. out of memory for the tuning buffers: never fail the call
        warnings.warn(f"cupyconv: autotuning failed ({e!r}); using the heuristic choice",
                      RuntimeWarning, stacklevel=2)
        result = None
    if result is None:
        return heuristic_choice(geom, "auto", device_id)
    return FORWARD[result.best.algorithm].with_plan(result.best.plan())


def tune(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
         dtype=None, retune=False, cache_file=None) -> TuneResult:
    """Time every candidate algorithm and tile configuration of a forward convolution on the
    current GPU and store the winner in the tuning cache.

    ``x`` and ``w`` are arrays (only their shapes and dtype are read; inputs of the tuner's own are
    timed) or shapes, with ``dtype`` (default float32).  ``retune=True`` measures again even where
    the cache has the problem.  ``cache_file`` overrides the cache path.  With
    ``CUPYCONV_AUTOTUNE=1``, ``cupyconv.conv(..., method="auto")`` then runs the winner.  Returns a
    :class:`TuneResult` (``best``, ``ms``, ``timings`` of every candidate, ``cached``).
    """
    del bias  # the epilogue's bias add does not change which configuration wins
    shape_x = tuple(x.shape) if hasattr(x, "shape") else tuple(x)
    shape_w = tuple(w.shape) if hasattr(w, "shape") else tuple(w)
    if dtype is None:
        dtype = x.dtype if hasattr(x, "dtype") else "float32"
    dtype = dtype_name(dtype)
    if dtype not in DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype}")
    geom = ConvGeometry.from_shapes(shape_x, shape_w, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, layout=layout, dtype=dtype)
    result = tune_geometry(geom, cache=TuneCache(cache_file) if cache_file else None,
                           retune=retune)
    if result is None:
        raise RuntimeError(f"no candidate algorithm could run {geom}")
    from cupyconv._core.caches import clear_caches

    clear_caches()  # a retuned winner replaces the choice (and prepared calls) remembered
    return result
