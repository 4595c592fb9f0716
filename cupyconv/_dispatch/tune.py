"""Autotuning: time the candidate algorithms and tile configurations of a problem once, keep the
winner in a JSON file under the user cache directory (:mod:`cupyconv._dispatch.tune_cache`).

The heuristic choice (``_dispatch.forward.heuristic_choice``) stays the default.  ``cupyconv.tune(...)`` tunes one
problem explicitly; ``CUPYCONV_AUTOTUNE=1`` makes ``method="auto"`` look every problem up in the
cache and tune it on first use.  A cache entry is keyed by device name, compute capability and the
geometry (which holds dtype and layout), so a file shared between machines or GPUs never hands one
device's winner to another.  Tuning never makes a call fail: an unwritable cache is a
warning, a candidate that fails is skipped, and with no candidate left the heuristic choice runs.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from cupyconv._core.dtypes import dtype_name
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DTYPES
from cupyconv._dispatch.tune_cache import TuneCache, _time_ms

SPLIT_CHOICES = (1, 2, 4, 8)


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
        from cupyconv._gemm.plans import GemmPlan

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
