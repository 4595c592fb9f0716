"""Depthwise-separable convolution: the fused kernel's plan and launch, and the unfused path.

The fused kernel (``kernel_src/separable.cu``) keeps the depthwise result in shared memory and
feeds it straight into the pointwise GEMM; it recomputes the depthwise tile once per block of
``8 * KT`` pointwise outputs, so it pays while those are few (MobileNet's projections) and the
unfused path (depthwise kernel, then the pointwise GEMM) takes over beyond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from . import jit
from ._depthwise import GRID_Y_MAX, SMEM_LIMIT, run_depthwise
from ._geometry import ConvGeometry
from ._kernels import SEPARABLE_KT, separable_module
from ._launch import Launch, element_strides, int64s, ints

ACTIVATIONS = {None: 0, "relu": 1, "relu6": 2}
SEP_P, SEP_CC = 128, 16                  # kernel constants: pixels per block, channels per chunk
FUSED_MAX_KP_BLOCKS = 2                  # more pointwise blocks: the depthwise recompute outweighs


@dataclass(frozen=True)
class FusedPlan:
    kt: int          # pointwise outputs per thread (8 * kt per block)
    kp_blocks: int
    pixel_tiles: int
    cc_chunk: int    # intermediate channels per chunk
    rows_max: int
    pitch: int
    smem: int


@lru_cache(maxsize=1024)
def fused_plan(dw: ConvGeometry, kp: int) -> FusedPlan | None:
    """The fused kernel's launch for depthwise problem ``dw`` followed by ``kp`` pointwise outputs,
    or None where it cannot run (3-d, or a window too large for shared memory)."""
    if dw.ndim == 3:
        return None
    g3 = dw.as_3d()
    _, oh, ow = g3["out_spatial"]
    _, kh, kw = g3["kernel"]
    _, sh, sw = g3["stride"]
    _, dh, dwl = g3["dilation"]
    kt = next((k for k in SEPARABLE_KT if 8 * k >= kp), SEPARABLE_KT[-1])
    rows_max = (math.ceil((SEP_P - 1) / ow) + 1) * sh + (kh - 1) * dh + 1
    pitch = (ow - 1) * sw + (kw - 1) * dwl + 1
    acc = 8 if dw.dtype == "float64" else 4
    fixed = (SEP_CC * SEP_P + SEP_CC * 8 * kt + SEP_CC * kh * kw) * acc
    for cc in (SEP_CC, 8, 4):
        smem = fixed + cc * rows_max * pitch * acc
        if smem <= SMEM_LIMIT:
            break
    else:
        return None
    tiles = math.ceil(oh * ow / SEP_P)
    kp_blocks = math.ceil(kp / (8 * kt))
    if dw.batch * tiles >= 2 ** 31 or kp_blocks > GRID_Y_MAX:
        return None
    return FusedPlan(kt, kp_blocks, tiles, cc, rows_max, pitch, smem)


def fused_pays(dw: ConvGeometry, kp: int) -> bool:
    plan = fused_plan(dw, kp)
    return plan is not None and plan.kp_blocks <= FUSED_MAX_KP_BLOCKS


@lru_cache(maxsize=1024)
def _fused_launch(dw: ConvGeometry, kp: int, has_b_dw: bool, has_b_pw: bool, act, x_strides: tuple,
                  device: int) -> Launch:
    plan = fused_plan(dw, kp)
    g3 = dw.as_3d()
    fn = jit.get_function(separable_module(dw.dtype, plan.kt), "separable_fused", dw.dtype,
                          (plan.kt,))
    return Launch(fn, (dw.batch * plan.pixel_tiles, plan.kp_blocks), (256,),
                  ints((has_b_dw, has_b_pw, ACTIVATIONS[act], dw.channels_last, dw.out_channels,
                        dw.out_channels // dw.in_channels, kp, *g3["spatial"][1:],
                        *g3["out_spatial"][1:], *g3["kernel"][1:], *g3["stride"][1:],
                        *g3["dilation"][1:], *g3["pad_lo"][1:]))
                  + int64s((x_strides[0], x_strides[1], x_strides[3], x_strides[4]))
                  + ints((plan.pixel_tiles, plan.cc_chunk, plan.rows_max, plan.pitch)), plan.smem,
                  packed=True)


def run_fused(dw: ConvGeometry, x, w_dw, b_dw, w_pw, b_pw, act: str | None, y) -> None:
    import cupy

    w_dw = w_dw if w_dw.flags.c_contiguous else cupy.ascontiguousarray(w_dw)
    w_pw = w_pw if w_pw.flags.c_contiguous else cupy.ascontiguousarray(w_pw)
    launch = _fused_launch(dw, w_pw.shape[0], b_dw is not None, b_pw is not None, act,
                           element_strides(x, dw.channels_last), y.data.device_id)
    with y.device:
        launch(x, w_dw, b_dw if b_dw is not None else y, w_pw, b_pw if b_pw is not None else y, y)


def run_unfused(dw: ConvGeometry, x, w_dw, b_dw, w_pw, b_pw, act: str | None, y) -> None:
    """Depthwise kernel into a buffer (bias fused), activation in place, then the pointwise conv."""
    import cupy

    from ._plan import choose

    mid = cupy.empty(dw.output_shape, dtype=dw.dtype)
    run_depthwise(dw, x, w_dw, b_dw, mid)
    if act == "relu":
        cupy.maximum(mid, 0, out=mid)
    elif act == "relu6":
        cupy.clip(mid, 0, 6, out=mid)
    pw = ConvGeometry.from_shapes(mid.shape, w_pw.shape, layout=dw.layout, dtype=dw.dtype)
    choose(pw, "auto").run(pw, mid, w_pw, b_pw, y)
