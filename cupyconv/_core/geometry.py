"""One description of an N-d convolution problem, and every rule about its shape.

Everything that needs an output size, a padding pair, a GEMM mapping or a FLOP count reads it from
:class:`ConvGeometry`; nothing else in the package recomputes shapes.  The module needs no GPU and no
CuPy (NumPy only to name dtypes, through :mod:`cupyconv._core.dtypes`), and geometries are
hashable: they key the plan cache.  The size limits every problem is checked against (the GEMM and
the filters check them too) are in :mod:`cupyconv._core.limits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from cupyconv._core.dtypes import dtype_name
from cupyconv._core.limits import (_LIMIT_WHY, EXTENT_LIMIT, as_int, check_extents,
                                   check_tensor_size)
from cupyconv._core.names import arg

LAYOUTS = ("NCHW", "NHWC")
PADDING_MODES = ("valid", "same", "same_lower")
MAX_SPATIAL_DIMS = 3


class GemmShape(NamedTuple):
    """A batch of ``batch`` independent ``(m x k) @ (k x n)`` products."""

    m: int
    n: int
    k: int
    batch: int


def per_dim(value, ndim: int, name: str, minimum: int) -> tuple[int, ...]:
    """An int or a tuple of ``ndim`` ints, each ``>= minimum`` and ``< 2**31``, as a tuple of
    ``ndim`` ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != ndim:
            raise ValueError(
                f"{arg(name)} must be an int or a sequence of {ndim} ints (one per spatial dim), "
                f"got {len(value)} values: {tuple(value)!r}")
        out = tuple(as_int(v, name) for v in value)
    else:
        out = (as_int(value, name),) * ndim
    for v in out:
        if v < minimum:
            raise ValueError(f"{arg(name)} must be >= {minimum} in every spatial dim, got {out!r}")
    check_extents(name, out, " in every spatial dim")
    return out


def effective_kernel(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, ...]:
    """Extent of each dilated kernel dimension: ``(k - 1) * d + 1``."""
    return tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation))


def normalize_padding(padding, spatial, kernel, stride, dilation):
    """Resolve every accepted padding form to per-dim ``(lo, hi)`` tuples.

    Accepted: an int; a per-dim sequence of ints; a per-dim sequence of ``(lo, hi)`` pairs; ``"valid"``;
    ``"same"`` (output = ceil(input / stride), the odd extra element at the end, as TensorFlow/JAX);
    ``"same_lower"`` (the odd extra element at the start, as ONNX's SAME_LOWER).
    """
    ndim = len(spatial)
    if isinstance(padding, str):
        mode = padding.lower()
        if mode not in PADDING_MODES:
            raise ValueError(
                f"{arg('padding')} must be an int, a per-dim tuple, per-dim (lo, hi) pairs or one "
                f"of {PADDING_MODES}, got {padding!r}")
        if mode == "valid":
            zero = (0,) * ndim
            return zero, zero
        lo, hi = [], []
        for size, ek, s in zip(spatial, effective_kernel(kernel, dilation), stride):
            out = -(-size // s)
            total = max((out - 1) * s + ek - size, 0)
            small, big = total // 2, total - total // 2
            lo.append(small if mode == "same" else big)
            hi.append(big if mode == "same" else small)
        return tuple(lo), tuple(hi)
    if isinstance(padding, (tuple, list)):
        if len(padding) != ndim:
            raise ValueError(
                f"{arg('padding')} must have one entry per spatial dim ({ndim}), got "
                f"{len(padding)}: {tuple(padding)!r}")
        lo, hi = [], []
        for p in padding:
            if isinstance(p, (tuple, list)):
                if len(p) != 2:
                    raise ValueError(f"each {arg('padding')} pair must be (lo, hi), got "
                                     f"{tuple(p)!r}")
                a, b = as_int(p[0], "padding"), as_int(p[1], "padding")
            else:
                a = b = as_int(p, "padding")
            lo.append(a)
            hi.append(b)
        lo, hi = tuple(lo), tuple(hi)
    else:
        lo = hi = (as_int(padding, "padding"),) * ndim
    if min(lo + hi) < 0:
        raise ValueError(f"{arg('padding')} must be >= 0, got lo={lo}, hi={hi}")
    if max(lo + hi) >= EXTENT_LIMIT:
        raise ValueError(f"{arg('padding')} must be < 2**31 on every side {_LIMIT_WHY}, got "
                         f"lo={lo}, hi={hi}")
    return lo, hi


@dataclass(frozen=True)
class ConvGeometry:
    """A grouped N-d convolution ``y = conv(x, w)`` in one of the two layouts.

    ``x`` is ``(N, C, *spatial)`` (NCHW) or ``(N, *spatial, C)`` (NHWC); ``w`` is ``(K, C/groups,
    *kernel)`` or ``(K, *kernel, C/groups)``; ``y`` has ``K`` channels and spatial size ``out_spatial``.
    Build it with :meth:`from_shapes`, which validates every argument.
    """

    batch: int
    in_channels: int
    out_channels: int
    groups: int
    spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_lo: tuple[int, ...]
    pad_hi: tuple[int, ...]
    layout: str = "NCHW"
    dtype: str | None = None
    # "exact" or "tf32" (float32 only; see cupyconv._core.precision): which GEMM main loop may run
    precision: str = "exact"

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_shapes(cls, input_shape, weight_shape, *, stride=1, padding=0, dilation=1, groups=1,
                    layout="NCHW", dtype=None, ndim=None) -> "ConvGeometry":
        """Validate a forward problem given by the shapes of ``x`` and ``w``.

        ``ndim``, when given, is the required number of spatial dims (``conv2d`` passes 2).
        Valid problems are memoized on their arguments (a call repeated in a training loop skips
        the validation); invalid ones raise every time.
        """
        args = (input_shape, weight_shape, stride, padding, dilation, groups, layout,
                None if dtype is None else dtype_name(dtype), ndim)
        try:
            key = _freeze(args)
            geom = _GEOMETRIES.get(key)
        except TypeError:  # an unhashable argument: validate without the memo
            return cls._validate(*args)
        if geom is None:
            geom = cls._validate(*args)
            if len(_GEOMETRIES) < _GEOMETRY_MEMO_SIZE:
                _GEOMETRIES[key] = geom
        return geom

    @classmethod
    def _validate(cls, input_shape, weight_shape, stride, padding, dilation, groups, layout, dtype,
                  ndim) -> "ConvGeometry":
        # Messages name the arguments and the shapes' roles (input, weight, output) as the caller
        # does (names.arg): identity for cupyconv's own functions, another API's names inside a
        # compatibility module.
        layout = normalize_layout(layout)
        input_shape = _shape(input_shape, "input_shape")
        weight_shape = _shape(weight_shape, "weight_shape")
        inp, wgt, groups_ = arg("input"), arg("weight"), arg("groups")
        nsp = len(input_shape) - 2
        if ndim is not None and nsp != ndim:
            raise ValueError(
                f"expected a {ndim + 2}-d {inp} (N, C and {ndim} spatial dims) for a {ndim}-d "
                f"convolution, got shape {input_shape}")
        if not 1 <= nsp <= MAX_SPATIAL_DIMS:
            raise ValueError(
                f"{inp} must have 3, 4 or 5 dims (N, C and 1-3 spatial dims), got shape "
                f"{input_shape}")
        if len(weight_shape) != len(input_shape):
            raise ValueError(
                f"{wgt} must have as many dims as {arg('input', 'the input')} "
                f"({len(input_shape)}), got {wgt} shape {weight_shape} for {inp} shape "
                f"{input_shape}")
        for name, shp in (("input_shape", input_shape), ("weight_shape", weight_shape)):
            if min(shp) < 1:
                raise ValueError(f"every dim of {arg(name)} must be >= 1, got {shp}")
        groups = as_int(groups, "groups")
        if groups < 1:
            raise ValueError(f"{groups_} must be >= 1, got {groups}")
        check_extents("groups", (groups,))
        n, c, spatial = _split(input_shape, layout)
        k, c_per_group, kernel = _split(weight_shape, layout)
        # every dim of both shapes: batch, channels, spatial sizes, kernel extents
        check_extents(f"every dim of {arg('input_shape')} (batch, channels, spatial sizes)",
                      input_shape)
        check_extents(f"every dim of {arg('weight_shape')} (channels, kernel sizes)",
                      weight_shape)
        if c % groups:
            raise ValueError(f"{inp} channels ({c}) must be divisible by {groups_} ({groups})")
        if k % groups:
            raise ValueError(f"output channels ({k}, {wgt} dim 0) must be divisible by {groups_} "
                             f"({groups})")
        if c_per_group != c // groups:
            where = "dim 1" if layout == "NCHW" else "the last dim"
            raise ValueError(
                f"{wgt} shape {weight_shape} does not fit {arg('layout')} {layout}: {where} must "
                f"be in_channels / {groups_} = {c} / {groups} = {c // groups}, got {c_per_group} "
                f"({inp} shape {input_shape})")
        stride = per_dim(stride, nsp, "stride", 1)
        dilation = per_dim(dilation, nsp, "dilation", 1)
        lo, hi = normalize_padding(padding, spatial, kernel, stride, dilation)
        geom = cls(n, c, k, groups, spatial, kernel, stride, dilation, lo, hi, layout,
                   None if dtype is None else dtype_name(dtype))
        dil, pad = arg("dilation"), arg("padding")
        check_extents(f"the dilated kernel extent (kernel - 1) * {dil} + 1",
                      effective_kernel(kernel, dilation), f" in every spatial dim (kernel "
                      f"{kernel}, {dil} {dilation})")
        check_extents(f"the padded {inp} extent ({inp} + {pad} lo + hi)", geom.padded_spatial,
                      f" in every spatial dim ({inp} spatial size {spatial}, {pad} lo={lo} "
                      f"hi={hi})")
        for i, (size, ek) in enumerate(zip(geom.padded_spatial, effective_kernel(kernel, dilation))):
            if ek > size:
                raise ValueError(
                    f"kernel (dilated extent {ek}) is larger than the padded {inp} ({size}) in "
                    f"spatial dim {i}: {inp} spatial size {spatial}, kernel {kernel}, {dil} "
                    f"{dilation}, {pad} lo={lo} hi={hi}")
        check_extents(f"{arg('output', 'the output')} spatial size", geom.out_spatial,
                      " in every spatial dim")
        for role, shape in (("input", geom.input_shape), ("weight", geom.weight_shape),
                            ("output", geom.output_shape)):
            check_tensor_size(arg(role, f"the {role}"), shape, geom.dtype)
        return geom

    # ------------------------------------------------------------------ shapes
    @property
    def ndim(self) -> int:
        """Number of spatial dims."""
        return len(self.spatial)

    @property
    def padded_spatial(self) -> tuple[int, ...]:
        return tuple(s + a + b for s, a, b in zip(self.spatial, self.pad_lo, self.pad_hi))

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple((p - ek) // s + 1 for p, ek, s in
                     zip(self.padded_spatial, effective_kernel(self.kernel, self.dilation), self.stride))

    @property
    def channels_last(self) -> bool:
        return self.layout == "NHWC"

    def layout_shape(self, lead: int, channels: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
        """(lead, channels, *spatial) ordered for this layout."""
        if self.channels_last:
            return (lead, *spatial, channels)
        return (lead, channels, *spatial)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.layout_shape(self.batch, self.in_channels, self.spatial)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        return self.layout_shape(self.out_channels, self.in_channels // self.groups, self.kernel)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.layout_shape(self.batch, self.out_channels, self.out_spatial)

    @property
    def col_shape(self) -> tuple[int, int, int]:
        """Shape of the explicit im2col matrix, per batch element, with groups folded into C.

        Channels-first: ``(N, C * taps, out)`` so that ``y[n] = w.reshape(K, -1) @ col[n]``;
        channels-last: ``(N, out, taps * C)`` so that ``y[n] = col[n] @ w.reshape(K, -1).T``.
        """
        taps, out = math.prod(self.kernel), math.prod(self.out_spatial)
        if self.channels_last:
            return self.batch, out, taps * self.in_channels
        return self.batch, self.in_channels * taps, out

    # ------------------------------------------------------------------ GEMM view and cost
    @property
    def gemm_forward(self) -> GemmShape:
        """y[(n, out), k] = col[(n, out), (c, taps)] @ w[(c, taps), k], once per group."""
        return GemmShape(self.batch * math.prod(self.out_spatial), self.out_channels // self.groups,
                         self.in_channels // self.groups * math.prod(self.kernel), self.groups)

    @property
    def gemm_backward_data(self) -> GemmShape:
        """dx[(n, in), c] = dy-view[(n, in), (k, taps)] @ w[(k, taps), c], once per group."""
        return GemmShape(self.batch * math.prod(self.spatial), self.in_channels // self.groups,
                         self.out_channels // self.groups * math.prod(self.kernel), self.groups)

    @property
    def gemm_backward_weight(self) -> GemmShape:
        """dw[k, (c, taps)] = dy[k, (n, out)] @ col[(n, out), (c, taps)], once per group."""
        return GemmShape(self.out_channels // self.groups,
                         self.in_channels // self.groups * math.prod(self.kernel),
                         self.batch * math.prod(self.out_spatial), self.groups)

    @property
    def flops(self) -> int:
        """Multiply-adds of the direct convolution, counted as 2 FLOPs each (same for all 3 passes)."""
        g = self.gemm_forward
        return 2 * g.m * g.n * g.k * g.batch

    def bytes_moved(self, itemsize: int) -> int:
        """The fewest bytes a forward pass must move: read x and w once, write y once."""
        return itemsize * (math.prod(self.input_shape) + math.prod(self.weight_shape)
                           + math.prod(self.output_shape))

    # ------------------------------------------------------------------ kernel arguments
    def as_3d(self) -> dict[str, tuple[int, ...]]:
        """Spatial parameters padded in front to 3 dims, so one kernel serves 1-, 2- and 3-d problems."""
        lead = MAX_SPATIAL_DIMS - self.ndim

        def pad(values, fill):
            return (fill,) * lead + tuple(values)

        return {"spatial": pad(self.spatial, 1), "out_spatial": pad(self.out_spatial, 1),
                "kernel": pad(self.kernel, 1), "stride": pad(self.stride, 1),
                "dilation": pad(self.dilation, 1), "pad_lo": pad(self.pad_lo, 0)}


def _freeze(v):
    """A hashable key for an argument: sequences become tuples, and every scalar carries its type
    (so that ``True`` and ``1``, or ``2.0`` and ``2``, stay different keys)."""
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(e) for e in v)
    return (type(v).__name__, v)


_GEOMETRY_MEMO_SIZE = 4096
_GEOMETRIES: dict = {}


def normalize_layout(layout) -> str:
    if not isinstance(layout, str) or layout.upper() not in LAYOUTS:
        raise ValueError(f"{arg('layout')} must be one of {LAYOUTS} (channels-first / channels-last for any "
                         f"number of spatial dims), got {layout!r}")
    return layout.upper()


def _shape(shape, name) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{arg(name)} must be a tuple of ints, got {shape!r}")
    return tuple(as_int(v, name) for v in shape)


def _split(shape, layout):
    """(lead, channels, spatial) of an activation or weight shape in ``layout``."""
    if layout == "NHWC":
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


def output_shape(input_shape, weight_shape, *, stride=1, padding=0, dilation=1, groups=1,
                 layout="NCHW") -> tuple[int, ...]:
    """Shape of ``conv(x, w)`` for the given shapes and options, with full argument validation.

    Pure Python: needs no GPU.  ``padding`` takes every form :func:`cupyconv.conv` takes.

    >>> output_shape((32, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3)
    (32, 64, 112, 112)
    """
    return ConvGeometry.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, layout=layout).output_shape


def transpose_output_spatial(in_spatial, kernel, stride, dilation, pad_lo, pad_hi, output_padding):
    """Spatial output size of a transposed convolution (PyTorch's formula, per-side padding);
    ValueError where it reaches 2**31 (the limit on every extent)."""
    out = tuple((i - 1) * s - a - b + (k - 1) * d + op + 1 for i, k, s, d, a, b, op in
                zip(in_spatial, kernel, stride, dilation, pad_lo, pad_hi, output_padding))
    check_extents("the transposed convolution's output size (in - 1) * stride - padding lo - hi "
                  "+ (kernel - 1) * dilation + output_padding + 1", out,
                  f" in every spatial dim (input {tuple(in_spatial)}, kernel {tuple(kernel)}, "
                  f"stride {tuple(stride)}, dilation {tuple(dilation)})")
    return out


def normalize_output_padding(output_padding, stride, dilation) -> tuple[int, ...]:
    """Per-dim output_padding, which must be smaller than stride or dilation (PyTorch's rule)."""
    op = per_dim(output_padding, len(stride), "output_padding", 0)
    for o, s, d in zip(op, stride, dilation):
        if o >= max(s, d):
            raise ValueError(f"output_padding must be smaller than stride or dilation in every dim, "
                             f"got output_padding={op}, stride={stride}, dilation={dilation}")
    return op
