"""The operations ``python -m cupyconv profile`` can run: inputs, the call under test, its two
references (float64 on the CPU, float64 on the GPU through other kernels) and its work counts.

Every reference is computed in float64 so the same tolerance rule (``_verify.tolerance``) judges
both verification modes.  The GPU references avoid the code path under test: the forward and
separable ones run the direct kernel, the backward ones go through im2col / col2im and
``cupy.matmul`` (cuBLAS), the signal one uses ``method="direct"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from cupyconv._cli.profile_args import ProfileProblem
from cupyconv._core.dtypes import itemsize, numpy_dtype


class MissingOperation(RuntimeError):
    """The operation's module is not in this cupyconv (separable_conv, signal)."""


def host_input(rng: np.random.Generator, shape, dtype: str, init: int):
    """Host data for one input: small integers (init 1) or uniform(-1, 1) decimals (init 2);
    complex dtypes get both parts.  None for init 0 (the device array stays uninitialized)."""
    if init == 0:
        return None

    def draw():
        if init == 1:
            return rng.integers(-3, 4, size=shape).astype(np.float64)
        return rng.uniform(-1.0, 1.0, size=shape)

    data = draw() + 1j * draw() if dtype.startswith("complex") else draw()
    return data.astype(numpy_dtype(dtype))


@dataclass
class OpRun:
    """One operation, ready to run: ``call()`` is what is timed."""

    call: Callable
    cpu_reference: Callable      # () -> float64 NumPy array
    gpu_reference: Callable      # () -> float64 CuPy array
    flops: int                   # 2 x multiply-adds of the direct method
    nbytes: int                  # the fewest bytes the operation must move (inputs + output)
    shapes: dict
    algorithm: dict = field(default_factory=dict)


def _device(rng, shape, dtype, init):
    import cupy

    host = host_input(rng, shape, dtype, init)
    dev = cupy.empty(shape, dtype=dtype) if host is None else cupy.asarray(host)
    return host, dev


def _f64(a):
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _to_cf(a, cl: bool):
    """A channels-last array as channels-first (a view)."""
    import cupy

    return cupy.moveaxis(a, -1, 1) if cl else a


def _from_cf(a, cl: bool):
    import cupy

    return cupy.ascontiguousarray(cupy.moveaxis(a, 1, -1)) if cl else a


def _pairs(geom):
    return tuple(zip(geom.pad_lo, geom.pad_hi))


def gpu_backward_data64(geom, dy, w):
    """dx in float64 via w^T @ dy (cuBLAS) and col2im: independent of the stride-phase kernel."""
    import cupy

    from cupyconv.im2col import col2im

    cl, g = geom.channels_last, geom.groups
    kg, cg = geom.out_channels // g, geom.in_channels // g
    taps, pixels = math.prod(geom.kernel), math.prod(geom.out_spatial)
    dyg = cupy.ascontiguousarray(_to_cf(_f64(dy), cl)).reshape(geom.batch, g, kg, pixels)
    wg = cupy.ascontiguousarray(_to_cf(_f64(w), cl)).reshape(g, kg, cg * taps)
    col = cupy.matmul(wg.transpose(0, 2, 1)[None], dyg)           # (N, G, Cg*taps, pixels)
    col = col.reshape(geom.batch, geom.in_channels * taps, pixels)
    dx = col2im(col, (geom.batch, geom.in_channels, *geom.spatial), geom.kernel,
                stride=geom.stride, padding=_pairs(geom), dilation=geom.dilation)
    return _from_cf(dx, cl)


def gpu_backward_weight64(geom, x, dy):
    """dw in float64 via im2col and dy @ col^T (cuBLAS): independent of the wgrad kernel."""
    import cupy

    from cupyconv.im2col import im2col

    cl, g = geom.channels_last, geom.groups
    kg, cg = geom.out_channels // g, geom.in_channels // g
    taps, pixels = math.prod(geom.kernel), math.prod(geom.out_spatial)
    col = im2col(cupy.ascontiguousarray(_to_cf(_f64(x), cl)), geom.kernel, stride=geom.stride,
                 padding=_pairs(geom), dilation=geom.dilation)
    colg = col.reshape(geom.batch, g, cg * taps, pixels)
    dyg = cupy.ascontiguousarray(_to_cf(_f64(dy), cl)).reshape(geom.batch, g, kg, pixels)
    dw = cupy.matmul(dyg, colg.transpose(0, 1, 3, 2)).sum(axis=0)  # (G, Kg, Cg*taps)
    return _from_cf(dw.reshape(geom.out_channels, cg, *geom.kernel), cl)


def _bias_host_dev(rng, prob, channels):
    if not prob.bias:
        return None, None
    return _device(rng, (channels,), prob.dtype, prob.init)


def _add_bias(y, bias, cl: bool, nsp: int):
    if bias is None:
        return y
    return y + (bias if cl else bias.reshape((-1,) + (1,) * nsp))


def build(prob: ProfileProblem, rng: np.random.Generator) -> OpRun:
    """The :class:`OpRun` of ``prob`` with inputs on the current device."""
    return {"fwd": _fwd, "bwd-data": _bwd_data, "bwd-weight": _bwd_weight,
            "transpose": _transpose, "separable": _separable, "signal": _signal}[prob.op](prob, rng)


def _fwd(prob, rng) -> OpRun:
    import cupyconv as cc
    from cupyconv._dispatch.choose import describe

    geom, opts = prob.geom, prob.options
    xh, x = _device(rng, geom.input_shape, prob.dtype, prob.init)
    wh, w = _device(rng, geom.weight_shape, prob.dtype, prob.init)
    bh, b = _bias_host_dev(rng, prob, geom.out_channels)
    return OpRun(
        call=lambda: cc.conv(x, w, b, method=prob.method, **opts),
        cpu_reference=lambda: cc.reference.conv(xh, wh, bh, **opts),
        gpu_reference=lambda: cc.conv(_f64(x), _f64(w), None if b is None else _f64(b),
                                      method="direct", **opts),
        flops=geom.flops, nbytes=geom.bytes_moved(itemsize(prob.dtype)),
        shapes={"x": geom.input_shape, "w": geom.weight_shape, "y": geom.output_shape},
        algorithm=describe(geom, prob.method))


_PHASES = "stride-phase implicit GEMM (one forward conv per stride phase, no atomics)"
_DESCRIPTIONS = {
    ("data", "implicit_gemm"): _PHASES,
    ("weight", "implicit_gemm"): "implicit-GEMM backward-weight (channels-last im2col view, "
                                 "deterministic split-K)",
    ("data", "depthwise"): "depthwise transposed tile/channels-last/gather kernel (each dx element "
                           "gathered once)",
    ("weight", "depthwise"): "depthwise per-chunk partial sums + fixed-order reduce",
}


def _backward_algorithm(geom, kind: str, name: str, prefix: str = "") -> dict:
    """What the backward pass ``kind`` ("data" / "weight") runs for ``geom``: the same choice as
    the public functions' ``method="auto"`` (depthwise problems take the depthwise kernels)."""
    from cupyconv._dispatch.backward import backward_method

    method = backward_method(geom, "auto").name
    return {"algorithm": f"{name} ({method})", "description": prefix + _DESCRIPTIONS[kind, method]}


def _bwd_data(prob, rng) -> OpRun:
    import cupyconv as cc

    geom, opts = prob.geom, prob.options
    dyh, dy = _device(rng, geom.output_shape, prob.dtype, prob.init)
    wh, w = _device(rng, geom.weight_shape, prob.dtype, prob.init)
    return OpRun(
        call=lambda: cc.conv_backward_data(dy, w, geom.input_shape, **opts),
        cpu_reference=lambda: cc.reference.conv_backward_data(dyh, wh, geom.input_shape, **opts),
        gpu_reference=lambda: gpu_backward_data64(geom, dy, w),
        flops=geom.flops, nbytes=geom.bytes_moved(itemsize(prob.dtype)),
        shapes={"dy": geom.output_shape, "w": geom.weight_shape, "dx": geom.input_shape},
        algorithm=_backward_algorithm(geom, "data", "backward_data"))


def _bwd_weight(prob, rng) -> OpRun:
    import cupyconv as cc

    geom, opts = prob.geom, prob.options
    xh, x = _device(rng, geom.input_shape, prob.dtype, prob.init)
    dyh, dy = _device(rng, geom.output_shape, prob.dtype, prob.init)
    return OpRun(
        call=lambda: cc.conv_backward_weight(x, dy, geom.weight_shape, **opts),
        cpu_reference=lambda: cc.reference.conv_backward_weight(xh, dyh, geom.weight_shape,
                                                                **opts),
        gpu_reference=lambda: gpu_backward_weight64(geom, x, dy),
        flops=geom.flops, nbytes=geom.bytes_moved(itemsize(prob.dtype)),
        shapes={"x": geom.input_shape, "dy": geom.output_shape, "dw": geom.weight_shape},
        algorithm=_backward_algorithm(geom, "weight", "backward_weight"))


def _transpose(prob, rng) -> OpRun:
    import cupy

    import cupyconv as cc

    geom, opts = prob.geom, prob.options
    cl = geom.channels_last
    xh, x = _device(rng, prob.x_shape, prob.dtype, prob.init)
    wh, w = _device(rng, prob.w_shape, prob.dtype, prob.init)
    bh, b = _bias_host_dev(rng, prob, geom.in_channels)

    def gpu_ref():
        dy = _f64(x)
        spatial = dy.shape[1:-1] if cl else dy.shape[2:]
        if geom.out_spatial != tuple(spatial):  # output_padding beyond the stride: zeros
            grow = [(0, o - s) for o, s in zip(geom.out_spatial, spatial)]
            dy = cupy.pad(dy, [(0, 0)] + grow + [(0, 0)] if cl else [(0, 0), (0, 0)] + grow)
        y = gpu_backward_data64(geom, dy, w)
        return _add_bias(y, None if b is None else _f64(b), cl, geom.ndim)

    return OpRun(
        call=lambda: cc.conv_transpose(x, w, b, **opts),
        cpu_reference=lambda: cc.reference.conv_transpose(xh, wh, bh, **opts),
        gpu_reference=gpu_ref, flops=geom.flops, nbytes=geom.bytes_moved(itemsize(prob.dtype)),
        shapes={"x": prob.x_shape, "w": prob.w_shape, "y": geom.input_shape},
        algorithm=_backward_algorithm(geom, "data", "transpose",
                                      "backward-data of the matching forward conv: "))


def _separable(prob, rng) -> OpRun:
    import cupyconv as cc

    try:
        from cupyconv import separable_conv
    except ImportError:
        raise MissingOperation("this cupyconv has no separable_conv yet (cupyconv/separable.py); "
                           "profile separable needs it") from None
    dw, pw = prob.geom, prob.pointwise
    spatial_opts = {k: prob.options[k] for k in ("stride", "padding", "dilation")}
    xh, x = _device(rng, dw.input_shape, prob.dtype, prob.init)
    wdh, wd = _device(rng, dw.weight_shape, prob.dtype, prob.init)
    wph, wp = _device(rng, pw.weight_shape, prob.dtype, prob.init)
    bdh, bd = _bias_host_dev(rng, prob, dw.out_channels)
    bph, bp = _bias_host_dev(rng, prob, pw.out_channels)

    def cpu_ref():
        t = cc.reference.conv(xh, wdh, bdh, groups=dw.groups, layout=dw.layout, **spatial_opts)
        return cc.reference.conv(t, wph, bph, layout=dw.layout)

    def gpu_ref():
        f = (lambda a: None if a is None else _f64(a))
        t = cc.conv(f(x), f(wd), f(bd), groups=dw.groups, layout=dw.layout, method="direct",
                    **spatial_opts)
        return cc.conv(t, f(wp), f(bp), layout=dw.layout, method="direct")

    item = itemsize(prob.dtype)
    nbytes = item * (math.prod(dw.input_shape) + math.prod(dw.weight_shape)
                     + math.prod(pw.weight_shape) + math.prod(pw.output_shape))
    return OpRun(
        call=lambda: separable_conv(x, wd, wp, bd, bp, layout=dw.layout, method=prob.method,
                                    **spatial_opts),
        cpu_reference=cpu_ref, gpu_reference=gpu_ref, flops=dw.flops + pw.flops, nbytes=nbytes,
        shapes={"x": dw.input_shape, "w_dw": dw.weight_shape, "w_pw": pw.weight_shape,
                "y": pw.output_shape},
        algorithm={"algorithm": prob.method, "description": "depthwise -> pointwise "
                   "(separable_conv)"})


def _signal(prob, rng) -> OpRun:
    try:
        from cupyconv import signal
    except ImportError:
        raise MissingOperation("this cupyconv has no signal module yet (cupyconv/signal.py); "
                           "profile signal needs it") from None
    s = prob.signal
    h1, a = _device(rng, s["in1"], prob.dtype, prob.init)
    h2, b = _device(rng, s["in2"], prob.dtype, prob.init)
    fn = getattr(signal, s["op"])

    def cpu_ref():
        from scipy import signal as sps

        return getattr(sps, s["op"])(_f64(h1), _f64(h2), mode=s["mode"])

    algorithm = {"algorithm": prob.method, "description": f"cupyconv.signal.{s['op']}"}
    if prob.method == "auto" and hasattr(signal, "choose_conv_method"):
        algorithm["algorithm"] = str(signal.choose_conv_method(a, b, mode=s["mode"]))
    mult = 4 if prob.dtype.startswith("complex") else 1  # a complex multiply-add is 4 real ones
    return OpRun(
        call=lambda: fn(a, b, mode=s["mode"], method=prob.method),
        cpu_reference=cpu_ref,
        gpu_reference=lambda: fn(_f64(a), _f64(b), mode=s["mode"], method="direct"),
        flops=2 * mult * s["macs"],
        nbytes=itemsize(prob.dtype) * (math.prod(s["in1"]) + math.prod(s["in2"])
                                       + math.prod(s["out"])),
        shapes={"in1": s["in1"], "in2": s["in2"], "out": s["out"]}, algorithm=algorithm)
