"""Kernel compilation, public side: compile ahead of time, inspect or clear the module cache.

Kernels compile at first use (NVRTC on NVIDIA, HIPRTC on AMD ROCm), one module after another as
a call reaches them; see :mod:`cupyconv._core.jit` for the cache and its key.  :func:`precompile`
compiles many modules at once, for instance those of a network's convolutions, before the first
call needs them.
"""

from __future__ import annotations

from collections.abc import Mapping

from cupyconv._core import jit as _jit
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.jit import COMPILE_OPTIONS, cache_info, clear_cache, get_function
from cupyconv._core.kernels import REGISTRY

__all__ = ["precompile", "modules_for", "cache_info", "clear_cache", "get_function",
           "COMPILE_OPTIONS"]

PASSES = ("forward", "backward_data", "backward_weight")
# keys of a problem given as a mapping beyond the conv options (see precompile)
_OWN_KEYS = ("x", "w", "dtype", "passes", "bias", "z")
_GEOMETRY_KEYS = ("stride", "padding", "dilation", "groups", "layout", "precision")


def _normalize(problem) -> tuple[dict, dict, tuple]:
    """(shapes and flags, conv keyword arguments, passes) of one problem."""
    if isinstance(problem, ConvGeometry):
        g = problem
        problem = dict(x=g.input_shape, w=g.weight_shape, dtype=g.dtype or "float32",
                       stride=g.stride, padding=tuple(zip(g.pad_lo, g.pad_hi)),
                       dilation=g.dilation, groups=g.groups, layout=g.layout,
                       precision=g.precision)
    if not isinstance(problem, Mapping):
        raise TypeError(f"a problem is a ConvGeometry or a mapping with the shapes 'x' and 'w', "
                        f"got {type(problem).__name__}")
    missing = [k for k in ("x", "w") if k not in problem]
    if missing:
        raise ValueError(f"a problem needs the shapes of x and w: {problem!r} lacks {missing}")
    own = {k: problem[k] for k in _OWN_KEYS if k in problem}
    options = {k: v for k, v in problem.items() if k not in _OWN_KEYS}
    passes = own.get("passes", ("forward",))
    passes = (passes,) if isinstance(passes, str) else tuple(passes)
    bad = [p for p in passes if p not in PASSES]
    if bad:
        raise ValueError(f"passes must be among {PASSES}, got {bad}")
    return own, options, passes


def _run(problem) -> None:
    """Call the passes of ``problem`` on uninitialized operands of its shapes (within
    ``discovering``, nothing compiles and nothing launches)."""
    import cupy

    from cupyconv._core.dtypes import numpy_dtype
    from cupyconv._core.geometry import output_shape
    from cupyconv.backward import conv_backward_data, conv_backward_weight
    from cupyconv.conv import conv

    own, options, passes = _normalize(problem)
    dtype = numpy_dtype(own.get("dtype", "float32"))
    xs, ws = tuple(own["x"]), tuple(own["w"])
    geometry = {k: v for k, v in options.items() if k in _GEOMETRY_KEYS}
    x, w = cupy.empty(xs, dtype), cupy.empty(ws, dtype)
    ys = output_shape(xs, ws, **{k: v for k, v in geometry.items() if k != "precision"})
    if "forward" in passes:
        bias = cupy.empty((w.shape[0],), dtype) if own.get("bias") else None
        z = cupy.empty(ys, dtype) if own.get("z") else None
        conv(x, w, bias, z=z, **options)
    if "backward_data" in passes or "backward_weight" in passes:
        dy = cupy.empty(ys, dtype)
        if "backward_data" in passes:
            conv_backward_data(dy, w, xs, **geometry)
        if "backward_weight" in passes:
            conv_backward_weight(x, dy, ws, **geometry)


def modules_for(problems) -> tuple:
    """The kernel modules that the convolutions ``problems`` (see :func:`precompile`) run on the
    current device, in the order they ask for them, found by running each problem's calls on
    uninitialized arrays of its shapes while nothing compiles and nothing launches
    (``cupyconv._core.jit.discovering``).  Every argument is validated as in a real call."""
    with _jit.discovering() as found:
        for problem in problems:
            _run(problem)
    return tuple(found)


def precompile(modules=None, *, problems=None, workers: int | None = None) -> int:
    """Compile kernel modules for the current device now, several at once, so that first calls
    find them compiled (in this process) or in the disk cache (in later ones).

    Parameters
    ----------
    modules : iterable of kernel modules, optional
        Modules to compile (default: every registered one, unless ``problems`` is given).
    problems : iterable, optional
        Convolutions whose kernels to compile (with ``modules``, both): each a
        :class:`cupyconv.ConvGeometry` or a mapping of ``x`` and ``w`` (the shapes of the input
        and the weights), ``dtype`` (default ``"float32"``), ``passes`` (any of ``"forward"``,
        ``"backward_data"``, ``"backward_weight"``; default ``("forward",)``), ``bias`` and
        ``z`` (True: the forward call gets a bias / residual) and the keyword arguments of
        :func:`cupyconv.conv` (``stride``, ``padding``, ``dilation``, ``groups``, ``layout``,
        ``precision``, and for the forward pass ``method`` and ``activation``).  E.g.
        ``dict(x=(1, 64, 56, 56), w=(64, 64, 3, 3), padding=1, dtype="float16")``.  The modules
        are those the calls would run on this device (:func:`modules_for`: the calls run on
        uninitialized arrays of these shapes, with nothing compiled or launched), so the plans
        are made too.  With ``CUPYCONV_AUTOTUNE=1`` the forward modules are the heuristic
        choice's; the tuner compiles what it measures when it runs.
    workers : int, optional
        Compiling threads (default: one per CPU this process may use).

    Returns
    -------
    int
        How many distinct modules were compiled or found in a cache.
    """
    todo = list(REGISTRY if modules is None and problems is None else (modules or ()))
    if problems is not None:
        todo += modules_for(problems)
    return _jit.compile_modules(todo, workers)
