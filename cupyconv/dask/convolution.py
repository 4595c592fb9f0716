"""Batched convolution of dask arrays: ``conv``, ``conv_transpose`` and ``separable_conv`` over
chunks of the batch axis, and ``conv`` over spatial chunks through padded 'valid' windows.
Weights are one key of the graph (:func:`cupyconv.dask.chunks._shared`)."""

from __future__ import annotations

from cupyconv.dask.chunks import (_backend, _dask_array, _for_block, _is_cupy, _require_dask,
                                  _shared, _staged)
from cupyconv.dask.graph import _map_windows


# options of the GPU functions that choose how, not what (the float64 reference has none)
_GPU_ONLY_OPTIONS = ("method", "precision")


def _conv_block(block, op, weights, options):
    """One chunk through ``cupyconv.<op>`` (CuPy) or the float64 ``cupyconv.reference.<op>``
    (NumPy, cast back to the chunk's dtype); ``weights``: the positional weight/bias arguments."""
    backend = _backend(block, "conv")
    if _is_cupy(block):
        return getattr(backend, op)(block, *_for_block(weights, block), **options)
    options = {k: v for k, v in options.items() if k not in _GPU_ONLY_OPTIONS}
    y = getattr(backend, op)(block, *_for_block(weights, block), **options)
    return y.astype(block.dtype, copy=False)


def _concrete_weights(x, weights: dict, what):
    da = _dask_array()
    for name, a in weights.items():
        if isinstance(a, da.Array):
            raise TypeError(f"{name} must be a concrete (NumPy or CuPy) array, not a dask array: "
                            f"call .compute() on it first")
    w = next(iter(weights.values()))
    if len(getattr(w, "shape", ())) != x.ndim:
        raise ValueError(f"x must be batched for {what}, (N, C, *spatial) or (N, *spatial, C): "
                         f"x.ndim ({x.ndim}) must equal w.ndim ({len(getattr(w, 'shape', ()))})")


def _map_batch(x, op: str, weights: tuple, options: dict, tail: tuple, gpu=None):
    """``cupyconv.<op>`` over the chunks of the batch axis (the other axes made one chunk);
    ``tail``: the output's shape after the batch axis."""
    from dask.array.utils import meta_from_array

    if any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk((x.chunks[0],) + tuple((s,) for s in x.shape[1:]))
    return x.map_blocks(_staged(_conv_block, gpu), op=op, weights=_shared(weights),
                        options=options,
                        chunks=(x.chunks[0],) + tuple((int(s),) for s in tail), dtype=x.dtype,
                        meta=meta_from_array(x, ndim=x.ndim, dtype=x.dtype))


def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW", gpu=None,
         **kwargs):
    """:func:`cupyconv.conv` of a dask array ``x`` of shape ``(N, C, *spatial)`` (or channels-last).

    ``w`` (and ``bias``) are concrete arrays, NumPy or CuPy, held once in the graph (one key, sent
    to each worker once; each worker copies them to a device once).  Chunks along the channel axis
    are merged.  Where the spatial axes are single chunks, each batch chunk is convolved whole
    (``map_blocks``).  Where a spatial axis is chunked (one very large image), ``x`` is
    zero-padded by ``padding`` first (``da.pad``) and each chunk is convolved without padding,
    with a halo of ``dilation * (kernel - 1)`` from its right neighbour (one task per chunk); with
    ``stride`` > 1 the chunk boundaries are moved onto multiples of the stride
    (:func:`window_chunks`).  ``kwargs`` (e.g. ``method``, ``activation``) pass to
    :func:`cupyconv.conv`.  Returns a dask array of the input's dtype.
    """
    from cupyconv._core.geometry import ConvGeometry

    x = _require_dask(x, "x")
    _concrete_weights(x, {"w": w, "bias": bias}, "conv")
    if "z" in kwargs:
        raise TypeError("z (a residual) is not supported on dask arrays: add it to the result")
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                    layout=layout)
    geom = ConvGeometry.from_shapes(x.shape, tuple(w.shape), **geometry)  # validates first
    out_shape = geom.output_shape
    channels_last = geom.layout == "NHWC"
    channel_axis = x.ndim - 1 if channels_last else 1
    spatial_axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    if all(len(x.chunks[ax]) == 1 for ax in spatial_axes):
        return _map_batch(x, "conv", (w, bias), dict(geometry, **kwargs), out_shape[1:], gpu)
    # spatially chunked: padding moves into the graph, each chunk runs unpadded
    windows = {ax: (lo, hi, d * (k - 1), s) for ax, lo, hi, k, s, d in
               zip(spatial_axes, geom.pad_lo, geom.pad_hi, geom.kernel, geom.stride,
                   geom.dilation)}
    options = dict(stride=geom.stride, padding=0, dilation=geom.dilation, groups=groups,
                   layout=layout, **kwargs)
    y = _map_windows(x, windows, {channel_axis: out_shape[channel_axis]}, _conv_block, x.dtype,
                     gpu, op="conv", weights=_shared((w, bias)), options=options)
    assert y.shape == tuple(out_shape), (y.shape, out_shape)  # window_chunks tiles the output
    return y


def conv_transpose(x, w, bias=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                   groups=1, layout="NCHW", gpu=None, **kwargs):
    """:func:`cupyconv.conv_transpose` of a dask array ``x`` of shape ``(N, C_in, *spatial)`` (or
    channels-last), chunk by chunk along the batch axis (channel and spatial chunks are merged).

    ``w``/``bias`` are concrete arrays as in :func:`conv`; ``kwargs`` (e.g. ``method``) pass to
    :func:`cupyconv.conv_transpose`.  NumPy chunks run the float64
    ``cupyconv.reference.conv_transpose``, cast back to the input's dtype.  Returns a dask array
    of the input's dtype.
    """
    from cupyconv._core.geometry import (normalize_layout, normalize_output_padding,
                                         normalize_padding, per_dim, transpose_output_spatial)

    x = _require_dask(x, "x")
    _concrete_weights(x, {"w": w, "bias": bias}, "conv_transpose")
    if isinstance(padding, str):
        raise ValueError(f"conv_transpose padding must be an int, a per-dim tuple or per-dim "
                         f"(lo, hi) pairs, got {padding!r}")
    layout = normalize_layout(layout)
    channels_last = layout == "NHWC"
    in_spatial = tuple(x.shape[1:-1]) if channels_last else tuple(x.shape[2:])
    kernel = tuple(w.shape[1:-1]) if channels_last else tuple(w.shape[2:])
    nsp = len(in_spatial)
    if not 1 <= nsp <= 3:
        raise ValueError(f"x must have 1-3 spatial dims, got shape {x.shape}")
    stride_t = per_dim(stride, nsp, "stride", 1)
    dilation_t = per_dim(dilation, nsp, "dilation", 1)
    pad_lo, pad_hi = normalize_padding(padding, in_spatial, kernel, stride_t, dilation_t)
    op = normalize_output_padding(output_padding, stride_t, dilation_t)
    out_spatial = transpose_output_spatial(in_spatial, kernel, stride_t, dilation_t, pad_lo,
                                           pad_hi, op)
    if min(out_spatial) < 1:
        raise ValueError(f"conv_transpose output would be empty: spatial size {out_spatial} for "
                         f"input {in_spatial}, kernel {kernel}, padding lo {pad_lo} hi {pad_hi}")
    groups_n = per_dim(groups, 1, "groups", 1)[0]
    c_out = (w.shape[-1] if channels_last else w.shape[1]) * groups_n
    if (x.shape[-1] if channels_last else x.shape[1]) != w.shape[0]:
        raise ValueError(f"x has {x.shape[-1] if channels_last else x.shape[1]} channels but w "
                         f"(C_in, ...) expects {w.shape[0]}: x {x.shape}, w {tuple(w.shape)}")
    tail = out_spatial + (c_out,) if channels_last else (c_out,) + out_spatial
    options = dict(stride=stride, padding=padding, output_padding=output_padding,
                   dilation=dilation, groups=groups, layout=layout, **kwargs)
    return _map_batch(x, "conv_transpose", (w, bias), options, tail, gpu)


def separable_conv(x, w_dw, w_pw, bias_dw=None, bias_pw=None, *, stride=1, padding=0,
                   dilation=1, activation=None, layout="NCHW", gpu=None, **kwargs):
    """:func:`cupyconv.separable_conv` (depthwise, ``activation``, pointwise) of a dask array
    ``x`` of shape ``(N, C, *spatial)`` (or channels-last), chunk by chunk along the batch axis
    (channel and spatial chunks are merged).

    The weights and biases are concrete arrays held once in the graph, as in :func:`conv`;
    ``kwargs`` (``method``) pass to :func:`cupyconv.separable_conv`.  NumPy chunks run the
    float64 ``cupyconv.reference.separable_conv``, cast back to the input's dtype.  Returns a
    dask array of the input's dtype.
    """
    from cupyconv._depthwise.separable import ACTIVATIONS
    from cupyconv.separable import separable_geometry

    x = _require_dask(x, "x")
    _concrete_weights(x, {"w_dw": w_dw, "w_pw": w_pw, "bias_dw": bias_dw, "bias_pw": bias_pw},
                      "separable_conv")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    dw, kp = separable_geometry(x.shape, w_dw.shape, w_pw.shape, stride=stride,
                                padding=padding, dilation=dilation, layout=layout)
    tail = dw.layout_shape(1, kp, dw.out_spatial)[1:]
    options = dict(stride=stride, padding=padding, dilation=dilation, activation=activation,
                   layout=layout, **kwargs)
    return _map_batch(x, "separable_conv", (w_dw, w_pw, bias_dw, bias_pw), options, tail, gpu)
