"""Depthwise-separable convolution: the choice between the fused kernel and the two-pass path.

``"auto"`` fuses while the pointwise outputs are few enough that recomputing the depthwise tile
per block of them pays (:func:`cupyconv._depthwise.separable.fused_pays`); otherwise the
depthwise kernel writes a buffer and the forward registry's choice runs the pointwise conv.
"""

from __future__ import annotations

from cupyconv._core.copy import contiguous_vector
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.program import not_preparable, scratch
from cupyconv._depthwise.launch import run_depthwise
from cupyconv._depthwise.separable import fused_pays, run_fused
from cupyconv._dispatch.callcache import PreparedCall, prepare
from cupyconv._dispatch.choose import choose

METHODS = ("auto", "fused", "unfused")


def run_unfused(dw: ConvGeometry, x, w_dw, b_dw, w_pw, b_pw, act: str | None, y) -> None:
    """Depthwise kernel into a buffer (bias fused), activation in place, then the pointwise conv."""
    import cupy

    mid = scratch(dw.output_shape, dw.dtype)
    run_depthwise(dw, x, w_dw, b_dw, mid)
    if act is not None:
        not_preparable("the activation runs as a CuPy operation")
        if act == "relu":
            cupy.maximum(mid, 0, out=mid)
        elif act == "relu6":
            cupy.clip(mid, 0, 6, out=mid)
    pw = ConvGeometry.from_shapes(mid.shape, w_pw.shape, layout=dw.layout, dtype=dw.dtype)
    choose(pw, "auto").run(pw, mid, w_pw, b_pw, y)


def prepare_separable(dw: ConvGeometry, method: str, budget: int, act: str | None,
                      inputs: tuple, y) -> PreparedCall:
    """Run the separable layer on validated ``inputs`` = (x, w_dw, w_pw, b_dw, b_pw) (writing y;
    the caller holds the device) and return the prepared call that repeats it."""
    kp = inputs[2].shape[0]
    fused = method == "fused" or (method == "auto" and fused_pays(dw, kp, budget))
    run = run_fused if fused else run_unfused

    def full(ops, y):
        x, w_dw, w_pw, b_dw, b_pw = ops
        run(dw, x, w_dw, contiguous_vector(b_dw), w_pw, contiguous_vector(b_pw), act, y)

    return prepare(full, ("x", "w_dw", "w_pw", "bias_dw", "bias_pw"), inputs, y)
