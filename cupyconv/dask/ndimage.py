"""The thirteen ``cupyconv.ndimage`` filters on dask arrays: each works out the halo it reaches
per axis and the modes along each axis, and maps the backend's filter of the same name over the
chunks (:func:`_map_filter`)."""

from __future__ import annotations

import functools
import operator

import numpy as np

from cupyconv._ndimage import args as _args
from cupyconv._ndimage.boundary import mode_code
from cupyconv._ndimage.dtypes import default_output_dtype
from cupyconv._ndimage.gaussian import _gaussian_radius
from cupyconv.dask.chunks import _backend, _require_dask, _staged
from cupyconv.dask.graph import _halo_map
from cupyconv.dask.halo import filter_reach, rechunk_for_depth


_WRAP_MODES = ("wrap", "grid-wrap")


# --------------------------------------------------------------------------- the map
def _boundary(modes: set) -> str | None:
    """dask's boundary for an axis filtered with ``modes``: periodic for wrap, none otherwise,
    None where both occur (the axis must then be one chunk)."""
    wrap = {m in _WRAP_MODES for m in modes}
    if wrap == {True, False}:
        return None
    return "periodic" if wrap == {True} else "none"


def _filter_block(block, name, args, kwargs):
    """The backend's ndimage filter ``name`` on one block (with its halo)."""
    return getattr(_backend(block), name)(block, *args, **kwargs)


def _map_filter(x, name: str, reaches: dict, modes: dict, out_dtype, args=(), kwargs=None,
                gpu=None):
    """Run the backend's ``name`` over ``x`` with per-axis halos ``reaches`` (axis -> (left,
    right) elements the filter reads before and after an output) and ``modes`` (axis -> set of
    mode names used along it), one task per output chunk (:func:`_halo_map`); ``gpu``: see
    :func:`_staged`."""
    from dask.array.utils import meta_from_array

    kwargs = dict(kwargs or {})
    kwargs["output"] = out_dtype
    reach, boundary, new_chunks = {}, {}, []
    for ax in range(x.ndim):
        left, right = (int(r) for r in reaches.get(ax, (0, 0)))
        depth = max(left, right)
        b = _boundary(modes.get(ax, {"reflect"})) if depth else "none"
        chunks = x.chunks[ax]
        if b is None:  # wrap and another mode along one axis: no single halo rule serves both
            chunks, b = (x.shape[ax],), "none"
        else:  # a halo comes from the next chunk alone, for either side it feeds
            chunks = rechunk_for_depth(chunks, depth)
        if len(chunks) == 1:  # the whole axis is in every chunk: the mode does the edge
            left = right = 0
        new_chunks.append(chunks)
        reach[ax], boundary[ax] = (left, right), b
    if tuple(new_chunks) != x.chunks:
        x = x.rechunk(tuple(new_chunks))
    filter_block = _staged(functools.partial(_filter_block, name=name, args=tuple(args),
                                             kwargs=kwargs), gpu)
    meta = meta_from_array(x, ndim=x.ndim, dtype=out_dtype)
    if not any(left or right for left, right in reach.values()):
        return x.map_blocks(filter_block, dtype=out_dtype, meta=meta)
    return _halo_map(x, reach, boundary, filter_block, out_dtype, meta, label=name)


# --------------------------------------------------------------------------- arguments
def _out_dtype(x, output, complex_output: bool) -> np.dtype:
    if output is None:
        return default_output_dtype(x.dtype.name, complex_output)
    if isinstance(output, (type, np.dtype, str)):
        dtype = np.dtype(output)
        return np.promote_types(dtype, np.complex64) if complex_output else dtype
    raise TypeError(f"output must be None or a dtype for dask arrays, got "
                    f"{type(output).__name__}: the result is a new dask array")


def _modes_along(mode, axes) -> dict:
    """axis -> {mode} for a scalar mode or one mode per axis of ``axes``."""
    items = _args._sequence(mode, len(axes), "mode")
    for m in items:
        mode_code(m)
    return {ax: {m} for ax, m in zip(axes, items)}


def _single_mode(mode, axes) -> dict:
    if not isinstance(mode, str):
        raise RuntimeError("A sequence of modes is not supported")
    mode_code(mode)
    return {ax: {mode} for ax in axes}


# --------------------------------------------------------------------------- 1-d filters
def correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0, *,
                gpu=None):
    """:func:`cupyconv.ndimage.correlate1d` of a dask array."""
    x = _require_dask(input)
    w = _args._host_weights_1d(weights)
    axis = _args._axis(axis, x.ndim)
    origin = _args._origin(origin, w.shape[0])
    out = _out_dtype(x, output, x.dtype.kind == "c" or w.dtype.kind == "c")
    return _map_filter(x, "correlate1d", {axis: filter_reach(w.shape[0], origin)},
                       _single_mode(mode, [axis]), out, (w,),
                       dict(axis=axis, mode=mode, cval=cval, origin=origin), gpu)


def convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0, *,
               gpu=None):
    """:func:`cupyconv.ndimage.convolve1d` of a dask array."""
    x = _require_dask(input)
    w = _args._host_weights_1d(weights)
    axis = _args._axis(axis, x.ndim)
    origin = _args._origin(origin, w.shape[0])  # valid exactly when the mirrored one is
    # convolution is correlation with the reversed weights and the mirrored origin
    mirrored = -origin - (1 - w.shape[0] % 2)
    out = _out_dtype(x, output, x.dtype.kind == "c" or w.dtype.kind == "c")
    return _map_filter(x, "convolve1d", {axis: filter_reach(w.shape[0], mirrored)},
                       _single_mode(mode, [axis]), out, (w,),
                       dict(axis=axis, mode=mode, cval=cval, origin=origin), gpu)


def _gaussian_reach(sigma, truncate, radius) -> tuple[int, int]:
    r = _gaussian_radius(float(sigma), truncate, radius)
    return r, r


def gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0,
                      truncate=4.0, *, radius=None, gpu=None):
    """:func:`cupyconv.ndimage.gaussian_filter1d` of a dask array."""
    x = _require_dask(input)
    axis = _args._axis(axis, x.ndim)
    out = _out_dtype(x, output, False)
    return _map_filter(x, "gaussian_filter1d", {axis: _gaussian_reach(sigma, truncate, radius)},
                       _single_mode(mode, [axis]), out, (sigma,),
                       dict(axis=axis, order=order, mode=mode, cval=cval, truncate=truncate,
                            radius=radius), gpu)


def _uniform_reach(size, origin) -> tuple[int, int]:
    size, origin = operator.index(size), operator.index(origin)
    if size < 1:
        raise RuntimeError(f"incorrect filter size {size}: size must be at least 1")
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError(f"invalid origin {origin} for a uniform filter of size {size}")
    return filter_reach(size, origin)


def uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0, *,
                     gpu=None):
    """:func:`cupyconv.ndimage.uniform_filter1d` of a dask array."""
    x = _require_dask(input)
    axis = _args._axis(axis, x.ndim)
    out = _out_dtype(x, output, x.dtype.kind == "c")
    return _map_filter(x, "uniform_filter1d", {axis: _uniform_reach(size, origin)},
                       _single_mode(mode, [axis]), out, (size,),
                       dict(axis=axis, mode=mode, cval=cval, origin=origin), gpu)


# --------------------------------------------------------------------------- N-d filters
def _correlate_nd(name, input, weights, output, mode, cval, origin, convolution, axes, gpu):
    x = _require_dask(input)
    w = _args._host_weights(weights)
    axes_t = _args._axes(axes, x.ndim)
    # the correlation each chunk runs: weights and origins per dim (convolution: reversed and
    # mirrored), as cupyconv.ndimage pairs them with the dims
    wd, origins = _args._nd_weights(x.ndim, w, origin, axes, convolution)
    reaches = {ax: filter_reach(size, operator.index(o))
               for ax, (size, o) in enumerate(zip(wd.shape, origins)) if wd.size}
    out = _out_dtype(x, output, x.dtype.kind == "c" or w.dtype.kind == "c")
    return _map_filter(x, name, reaches, _single_mode(mode, axes_t), out, (w,),
                       dict(mode=mode, cval=cval, origin=origin, axes=axes), gpu)


def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None,
              gpu=None):
    """:func:`cupyconv.ndimage.correlate` of a dask array."""
    return _correlate_nd("correlate", input, weights, output, mode, cval, origin, False, axes,
                         gpu)


def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None,
             gpu=None):
    """:func:`cupyconv.ndimage.convolve` of a dask array."""
    return _correlate_nd("convolve", input, weights, output, mode, cval, origin, True, axes,
                         gpu)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0,
                    *, radius=None, axes=None, gpu=None):
    """:func:`cupyconv.ndimage.gaussian_filter` of a dask array."""
    x = _require_dask(input)
    axes_t = _args._axes(axes, x.ndim)
    n = len(axes_t)
    sigmas, radii = _args._sequence(sigma, n, "sigma"), _args._sequence(radius, n, "radius")
    reaches = {ax: _gaussian_reach(s, truncate, r) for ax, s, r in zip(axes_t, sigmas, radii)
              if s > 1e-15}  # as the filter: smaller sigmas are skipped
    out = _out_dtype(x, output, False)
    return _map_filter(x, "gaussian_filter", reaches, _modes_along(mode, axes_t), out, (sigma,),
                       dict(order=order, mode=mode, cval=cval, truncate=truncate, radius=radius,
                            axes=axes), gpu)


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None,
                   gpu=None):
    """:func:`cupyconv.ndimage.uniform_filter` of a dask array."""
    x = _require_dask(input)
    axes_t = _args._axes(axes, x.ndim)
    # the passes cupyconv.ndimage runs (sizes above 1, truncated to integers, as SciPy)
    reaches = {ax: _uniform_reach(s, o)
               for ax, s, o, _ in _args.uniform_axes(size, origin, mode, axes, x.ndim)}
    out = _out_dtype(x, output, x.dtype.kind == "c")
    return _map_filter(x, "uniform_filter", reaches, _modes_along(mode, axes_t), out, (size,),
                       dict(mode=mode, cval=cval, origin=origin, axes=axes), gpu)


def _edge_filter(name, input, axis, output, mode, cval, gpu):
    x = _require_dask(input)
    _args._axis(axis, x.ndim)
    out = _out_dtype(x, output, x.dtype.kind == "c")
    every = tuple(range(x.ndim))  # 3 taps along the axis, 3 smoothing taps along every other
    return _map_filter(x, name, {ax: (1, 1) for ax in every}, _modes_along(mode, every), out, (),
                       dict(axis=axis, mode=mode, cval=cval), gpu)


def sobel(input, axis=-1, output=None, mode="reflect", cval=0.0, *, gpu=None):
    """:func:`cupyconv.ndimage.sobel` of a dask array."""
    return _edge_filter("sobel", input, axis, output, mode, cval, gpu)


def prewitt(input, axis=-1, output=None, mode="reflect", cval=0.0, *, gpu=None):
    """:func:`cupyconv.ndimage.prewitt` of a dask array."""
    return _edge_filter("prewitt", input, axis, output, mode, cval, gpu)


def laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None, gpu=None):
    """:func:`cupyconv.ndimage.laplace` of a dask array."""
    x = _require_dask(input)
    axes_t = _args._axes(axes, x.ndim)
    out = _out_dtype(x, output, False)
    return _map_filter(x, "laplace", {ax: (1, 1) for ax in axes_t}, _modes_along(mode, axes_t), out,
                       (), dict(mode=mode, cval=cval, axes=axes), gpu)


def _gaussian_derivative(name, input, sigma, output, mode, cval, axes, gpu, kwargs):
    x = _require_dask(input)
    axes_t = _args._axes(axes, x.ndim)
    unknown = set(kwargs) - {"truncate", "radius"}
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    # every term runs the Gaussian over every dim with these sigmas (0: that dim is not filtered)
    full = _args.gaussian_term_sigmas(name, sigma, axes_t, x.ndim)
    radii = _args._sequence(kwargs.get("radius"), x.ndim, "radius")
    truncate = kwargs.get("truncate", 4.0)
    reaches = {ax: _gaussian_reach(full[ax], truncate, radii[ax]) for ax in range(x.ndim)
              if full[ax] > 1e-15}
    # the term of each axis runs the Gaussian along every axis with that axis's mode
    used = {m for ms in _modes_along(mode, axes_t).values() for m in ms}
    out = _out_dtype(x, output, False)
    return _map_filter(x, name, reaches, {ax: used for ax in range(x.ndim)}, out, (sigma,),
                       dict(mode=mode, cval=cval, axes=axes, **kwargs), gpu)


def gaussian_laplace(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None, gpu=None,
                     **kwargs):
    """:func:`cupyconv.ndimage.gaussian_laplace` of a dask array."""
    return _gaussian_derivative("gaussian_laplace", input, sigma, output, mode, cval, axes, gpu,
                                kwargs)


def gaussian_gradient_magnitude(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None,
                                gpu=None, **kwargs):
    """:func:`cupyconv.ndimage.gaussian_gradient_magnitude` of a dask array."""
    return _gaussian_derivative("gaussian_gradient_magnitude", input, sigma, output, mode, cval,
                                axes, gpu, kwargs)
