"""SciPy's correlate/convolve semantics as a plan: pure Python and NumPy, no GPU, no kernels.

Every public function of :mod:`cupyconv.signal` reduces to one correlation

    out[o] = sum_j X[o - pad_lo + j] * g[j]          (over the convolved axes)

of a first operand ``a`` read through a boundary mode (``X``) with an effective kernel ``g``,
followed by an optional reversal / conjugation of the output.  :func:`plan_filter` derives, from
shapes and dtypes only, which operand is ``a`` (SciPy's 'valid'-mode swap rule), whether ``g`` is
the flipped or conjugated second operand, the pads that reproduce SciPy's 'same' alignment (which
differs between ``correlate`` and ``correlate2d`` for even kernels), the output shape and the
result dtype.  The GPU paths (direct kernel, FFT) execute a plan; :func:`numpy_filter` executes it
with NumPy so CPU tests can hold the plan against ``scipy.signal`` itself.
"""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass

import numpy as np

from cupyconv._core.geometry import EXTENT_LIMIT, check_extents, check_tensor_size
from cupyconv._signal.dtypes import check_dtype, fftconvolve_dtype, result_dtype

MODES = ("full", "valid", "same")
METHODS = ("auto", "direct", "fft")
# SciPy's boundary names (and aliases) -> the kernel's three modes.
BOUNDARIES = {"fill": "fill", "pad": "fill", "wrap": "wrap", "circular": "wrap",
              "symm": "symm", "symmetric": "symm"}
BOUNDARY_CODE = {"fill": 0, "wrap": 1, "symm": 2}
# FFT-only functions: axes of length 1 broadcast, results are floats
FREQUENCY_FUNCS = ("fftconvolve", "oaconvolve")
MAX_DIRECT_AXES = 3  # the direct kernel filters up to three axes (plus any batch axes)


def check_mode(mode) -> str:
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of 'full', 'valid', 'same' (Acceptable mode flags are "
                         f"'valid', 'same', or 'full'.), got {mode!r}")
    return mode


def check_method(method) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of 'auto', 'direct', 'fft' (Acceptable method flags "
                         f"are 'auto', 'direct', or 'fft'.), got {method!r}")
    return method


def check_boundary(boundary) -> str:
    if not isinstance(boundary, str) or boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be 'fill', 'wrap' (or 'circular') or 'symm' (or "
                         f"'symmetric') (Acceptable boundary flags are 'fill', 'circular' (or "
                         f"'wrap'), and 'symmetric' (or 'symm').), got {boundary!r}")
    return BOUNDARIES[boundary]


# --------------------------------------------------------------------------- SciPy's CPU model
# The cost model of SciPy's choose_conv_method (fitted by SciPy on CPUs: seconds per FFT and per
# direct operation, and an offset, by mode; scipy.signal._signaltools._fftconv_faster), used only
# where our own model cannot answer: operands that convolve refuses, which SciPy still judges.
_SCIPY_1D = {"full": (1.7649070e-9, 2.1414831e-10), "valid": (1.89095737e-9, 2.1364985e-10),
             "same": (3.2646654e-9, 2.8478277e-10)}
_SCIPY_1D_SAME_LONGER_IN2 = (3.21635404e-9, 1.1773253e-8, -1e-5)
_SCIPY_ND = {"full": (1.99817e-9, 1.66174e-8), "valid": (1.85927e-9, 2.11242e-8),
             "same": (2.04735e-9, 1.55367e-8)}


def scipy_fft_faster(shape1, shape2, mode: str) -> bool:
    """Whether SciPy's CPU cost model takes the FFT for operands of these shapes (its
    choose_conv_method after its integer and bool tests).  SciPy counts operations on the shapes
    zipped (so operands of different dimensionality are judged on their leading dims) and, for a
    1-d ``in1``, on the first dim of ``in2``: a 0-d ``in2`` there is SciPy's IndexError."""
    s1, s2 = tuple(shape1), tuple(shape2)
    full = [n + k - 1 for n, k in zip(s1, s2)]
    if len(s1) == 1:
        if not s2:
            raise IndexError("in2 is 0-d and in1 1-d: SciPy's choose_conv_method reads in2's "
                             "first dim (IndexError); convolve refuses these operands")
        n, k = s1[0], s2[0]
        direct = {"full": n * k,
                  "valid": (k - n + 1) * n if k >= n else (n - k + 1) * k,
                  "same": n * k if n < k else n * k - (k // 2) * ((k + 1) // 2)}[mode]
        per_fft, per_direct, offset = _SCIPY_1D[mode] + (-1e-3,)
        if mode == "same" and math.prod(s2) > n:
            per_fft, per_direct, offset = _SCIPY_1D_SAME_LONGER_IN2
    else:
        p1, p2 = math.prod(s1), math.prod(s2)
        out = {"full": full, "valid": [abs(n - k) + 1 for n, k in zip(s1, s2)], "same": s1}[mode]
        direct = p1 * p2 if mode == "same" else min(p1, p2) * math.prod(out)
        per_fft, per_direct, offset = _SCIPY_ND[mode] + (-1e-4,)
    points = math.prod(full)
    with np.errstate(divide="ignore", invalid="ignore"):
        fft = 3 * points * np.log(points)  # (NaN for 0 points: never faster, as in SciPy)
    return bool(per_fft * fft < per_direct * direct + offset)


# --------------------------------------------------------------------------- axes
def axes_key(axes):
    """``axes`` as None or a tuple of ints (any sign), hashable, by ``scipy.fft``'s rule: a
    number or an iterable of integers (``operator.index``); floats, nested sequences or other
    objects raise ``ValueError``."""
    if axes is None:
        return None
    seq = (axes,) if isinstance(axes, numbers.Number) else axes
    try:
        return tuple(operator.index(a) for a in seq)
    except TypeError:
        raise ValueError(f"axes must be a scalar or iterable of integers, got {axes!r}") from None


def normalize_axes(ndim: int, axes) -> tuple[int, ...]:
    """``axes`` (None, int or sequence) as unique non-negative ints, SciPy's checks and messages."""
    if axes is None:
        return tuple(range(ndim))
    seq = axes_key(axes)
    out = []
    for a in seq:
        if not -ndim <= a < ndim:
            raise ValueError(f"axes {seq}: axes exceeds dimensionality of input ({ndim})")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axes {seq}: all axes must be unique")
    if not seq:
        raise ValueError("axes: when provided, axes cannot be empty")
    return tuple(out)


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class FilterPlan:
    """One correlation ``out = reverse?(conj?(corr_boundary(a, g)))`` over ``axes``.

    ``swapped``: ``a`` is the caller's second operand.  ``g`` is the other operand, conjugated if
    ``conj_kernel`` and reversed along ``axes`` if ``flip_kernel``.  Non-convolved axes broadcast.
    """

    func: str
    mode: str
    shape_a: tuple[int, ...]
    shape_g: tuple[int, ...]
    axes: tuple[int, ...]
    swapped: bool
    flip_kernel: bool
    conj_kernel: bool
    pad_lo: tuple[int, ...]          # per entry of ``axes``
    out_shape: tuple[int, ...]
    reverse_out: bool
    conj_out: bool
    boundary: str
    result_dtype: np.dtype
    # the precision of the FFT path, SciPy's (:func:`fftconvolve_dtype` of the operands)
    fft_dtype: np.dtype
    # 'same' with a batch axis where in1 has length 1 and in2 more keeps in1's length, taking
    # in2's centre entry (SciPy's ``_centered``): (axis, index) pairs selecting it.
    kernel_select: tuple[tuple[int, int], ...] = ()

    @property
    def batch_axes(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.out_shape)) if i not in self.axes)

    def taps(self) -> int:
        return math.prod(self.shape_g[a] for a in self.axes)

    def outputs(self) -> int:
        return math.prod(self.out_shape)


def _swap_needed(mode, s1, s2, axes) -> bool:
    """SciPy's rule: in 'valid' mode the first operand must be at least the second on every axis,
    or the other way round (then they swap); anything else is an error."""
    if mode != "valid" or not axes:
        return False
    ok1 = all(s1[i] >= s2[i] for i in axes)
    ok2 = all(s2[i] >= s1[i] for i in axes)
    if not (ok1 or ok2):
        raise ValueError(f"in1 {tuple(s1)} and in2 {tuple(s2)}: for 'valid' mode, one must be at "
                         f"least as large as the other in every dimension")
    return not ok1


def plan_filter(shape1, shape2, dtype1, dtype2, *, func: str, mode: str = "full",
                boundary: str = "fill", axes=None, prefer_small_kernel: bool = False) -> FilterPlan:
    """The correlation that reproduces ``scipy.signal.<func>(in1, in2, mode, ...)``.

    ``func`` is one of ``correlate``, ``convolve``, ``correlate2d``, ``convolve2d``,
    ``fftconvolve``, ``oaconvolve``.  ``axes`` (not SciPy's for correlate/convolve: our batching
    extension) follows ``fftconvolve``: axes where either operand has length 1 broadcast instead
    of convolving, and every non-convolved axis must match or be 1.  ``prefer_small_kernel``
    lets 'full' mode of the N-d functions swap the operands when that gives fewer taps (same
    numbers, cheaper).
    Raises ``ValueError``/``TypeError`` as SciPy does, naming the argument.
    """
    mode = check_mode(mode)
    boundary = check_boundary(boundary)
    s1, s2 = tuple(int(n) for n in shape1), tuple(int(n) for n in shape2)
    d1, d2 = check_dtype(dtype1, "in1"), check_dtype(dtype2, "in2")
    two_d = func in ("correlate2d", "convolve2d")
    if two_d and not len(s1) == len(s2) == 2:
        raise ValueError(f"{func} inputs must both be 2-D arrays, got in1 {s1} and in2 {s2}")
    if len(s1) != len(s2):
        raise ValueError(f"in1 {s1} and in2 {s2} should have the same dimensionality")
    if not s1:
        raise ValueError("in1 and in2 are 0-d: multiply them instead")
    if 0 in s1 or 0 in s2:
        raise ValueError(f"in1 {s1} and in2 {s2} must not be empty")
    ndim = len(s1)
    frequency = func in FREQUENCY_FUNCS
    broadcasting = axes is not None or frequency
    axes = normalize_axes(ndim, axes)
    if broadcasting:
        axes = tuple(a for a in axes if s1[a] != 1 and s2[a] != 1)
        for a in range(ndim):
            if a not in axes and not (s1[a] == s2[a] or s1[a] == 1 or s2[a] == 1):
                raise ValueError(f"incompatible shapes for in1 and in2: {s1} and {s2} (axis {a} "
                                 f"is not convolved, so it must match or be 1)")
    axes = tuple(sorted(axes))
    correlating = func in ("correlate", "correlate2d")
    swapped = _swap_needed(mode, s1, s2, axes)
    # (never for correlate2d/convolve2d: their boundary and fill value belong to in1)
    if (not swapped and prefer_small_kernel and mode == "full" and not two_d
            and math.prod(s2[a] for a in axes) > math.prod(s1[a] for a in axes)):
        swapped = True
    sa, sg = (s2, s1) if swapped else (s1, s2)
    # Correlation with g: convolve flips the kernel; correlate conjugates it.  Swapped correlate
    # undoes the swap by reversing (and, except correlate2d's 'valid' swap, conjugating) the output.
    reverse_out = swapped and correlating
    conj_out = reverse_out and not (func == "correlate2d" and mode == "valid")
    pad_lo, out_shape, select = [], [], []
    for i in range(ndim):
        n1, n2 = sa[i], sg[i]
        if i not in axes:
            if mode == "same" and n1 < n2:
                select.append((i, (n2 - 1) // 2))
            out_shape.append(n1 if mode == "same" else max(n1, n2))
            continue
        if mode == "full":
            off, n = 0, n1 + n2 - 1
        elif mode == "valid":
            off, n = n2 - 1, n1 - n2 + 1
        else:  # 'same' never swaps; correlate2d centres even kernels one element later
            off = n2 // 2 if func == "correlate2d" else (n2 - 1) // 2
            n = n1
        pad_lo.append(n2 - 1 - off)
        out_shape.append(n)
    # The FFT functions return floats, except where no axis needs a transform: SciPy then returns
    # the plain product, in the operands' own promoted type.  correlate/convolve by FFT transform
    # in the same floats and cast to their result dtype (float32 x uint16: float64 transforms).
    transform = fftconvolve_dtype(d1, d2)
    result = transform if frequency and axes else result_dtype(d1, d2)
    check_tensor_size(f"the result of {func}", out_shape, result)
    return FilterPlan(func=func, mode=mode, shape_a=sa, shape_g=sg, axes=axes, swapped=swapped,
                      flip_kernel=not correlating, conj_kernel=correlating, pad_lo=tuple(pad_lo),
                      out_shape=tuple(out_shape), reverse_out=reverse_out, conj_out=conj_out,
                      boundary=boundary, result_dtype=result, fft_dtype=transform,
                      kernel_select=tuple(select))


def _direct_extents(plan: FilterPlan) -> dict:
    """The sizes the direct kernels take as 32-bit ints: every extent of the operands and the
    result, the pads, and (bounding it) the number of planes outside the last two filter axes."""
    out = plan.out_shape
    return {"in1/in2 dims": plan.shape_a + plan.shape_g, "result dims": out,
            "padding": plan.pad_lo,
            "planes": (math.prod(out) // math.prod(out[a] for a in plan.axes[-2:]),)}


def direct_fits(plan: FilterPlan) -> bool:
    """Whether the direct kernel can take the plan's sizes (else only the FFT can run it)."""
    return all(v < EXTENT_LIMIT for vs in _direct_extents(plan).values() for v in vs)


def check_direct_sizes(plan: FilterPlan) -> None:
    """ValueError naming the size when the direct kernel cannot take the plan (method='direct')."""
    for name, values in _direct_extents(plan).items():
        check_extents(f"method='direct': {name}", values, " (use method='fft')")


def boundary_indices(start: int, count: int, n: int, boundary: str) -> np.ndarray:
    """Source index of coordinates ``start .. start + count - 1`` of an axis of length ``n``
    under ``boundary`` (-1 where the fill value applies); the kernel's ``boundary_index``."""
    i = np.arange(start, start + count)
    if boundary == "fill":
        return np.where((i >= 0) & (i < n), i, -1)
    if boundary == "wrap":
        return np.mod(i, n)
    m = np.mod(i, 2 * n)
    return np.where(m < n, m, 2 * n - 1 - m)


def kernel_operand(plan: FilterPlan, g, xp=np):
    """``g`` of the plan from the array that is not ``a`` (selected, conjugated, flipped)."""
    for axis, index in plan.kernel_select:
        g = g[(slice(None),) * axis + (slice(index, index + 1),)]
    if plan.conj_kernel and g.dtype.kind == "c":
        g = xp.conj(g)
    if plan.flip_kernel and plan.axes:
        g = xp.flip(g, axis=plan.axes)
    return g


def finish(plan: FilterPlan, z, xp=np):
    """Apply the plan's output reversal and conjugation."""
    if plan.reverse_out and plan.axes:
        z = xp.flip(z, axis=plan.axes)
    if plan.conj_out and z.dtype.kind == "c":
        z = xp.conj(z)
    return z


def numpy_filter(plan: FilterPlan, in1, in2, fillvalue=0) -> np.ndarray:
    """Execute ``plan`` with NumPy in float64/complex128 (the CPU model of the GPU paths)."""
    a, g = (in2, in1) if plan.swapped else (in1, in2)
    work = np.complex128 if plan.result_dtype.kind == "c" else np.float64
    a = np.asarray(a).astype(work)
    g = kernel_operand(plan, np.asarray(g).astype(work))
    index = []
    for i in range(a.ndim):
        if i in plan.axes:
            k = plan.axes.index(i)
            count = plan.out_shape[i] + g.shape[i] - 1
            index.append(boundary_indices(-plan.pad_lo[k], count, a.shape[i], plan.boundary))
        else:
            index.append(np.arange(a.shape[i]))
    grids = np.ix_(*index)
    fill_mask = np.zeros(tuple(len(ix) for ix in index), bool)
    for i, ix in enumerate(grids):
        fill_mask = fill_mask | (ix < 0)
    x = a[tuple(np.maximum(ix, 0) for ix in grids)]
    x[fill_mask] = fillvalue
    out = np.zeros(plan.out_shape, np.result_type(x, g))
    # Sum over taps of shifted views; batch axes broadcast between x and g.
    for tap in np.ndindex(*[g.shape[i] for i in plan.axes]):
        sl_x = [slice(None)] * a.ndim
        sl_g = [slice(None)] * a.ndim
        for k, ax in enumerate(plan.axes):
            sl_x[ax] = slice(tap[k], tap[k] + plan.out_shape[ax])
            sl_g[ax] = slice(tap[k], tap[k] + 1)
        out = out + x[tuple(sl_x)] * g[tuple(sl_g)]
    return finish(plan, out)
