"""Depthwise-separable convolution: the fused kernel's plan and launch, and the unfused path.

The fused kernel (``kernel_src/separable.cu``) keeps the depthwise result in shared memory and
feeds it straight into the pointwise GEMM; it recomputes the depthwise tile once per block of
``KG * KT`` pointwise outputs (up to 256 / (pixels / 4) groups of up to 8), so it pays while
those are few (MobileNet's projections) and the unfused path (depthwise kernel, then the
pointwise GEMM) takes over beyond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cupyconv._core import jit
from cupyconv._core.activation import ACTIVATIONS as ALL_ACTIVATIONS
from cupyconv._core.caches import memoized
from cupyconv._core.copy import contiguous
from cupyconv._core.dtypes import compute_dtype, itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import KERNEL_CONSTANTS, SEPARABLE_KT, separable_module
from cupyconv._core.launch import (GRID_YZ_MAX, Launch, device_smem_limit, element_strides, int64s,
                                   ints)
from cupyconv._depthwise.tiles import SMEM_LIMIT, fixed_kernel, vector_rows

# The fused kernel's clamp takes these codes (separable.cu): the shared table's, limited to clamps.
ACTIVATIONS = {name: ALL_ACTIVATIONS[name] for name in (None, "relu", "relu6")}
THREADS = KERNEL_CONSTANTS["SEP_THREADS"]
SEP_CC = KERNEL_CONSTANTS["SEP_CC"]      # most intermediate channels per chunk
MAX_PIXELS = 256         # output pixels per block: 4 per thread in the pointwise step
MAX_TILE_W = 64          # widest tile of a 2-d problem (1-d: MAX_PIXELS)
FUSED_MAX_KP_BLOCKS = 2  # more pointwise blocks: the depthwise recompute outweighs
# Shared memory the fused kernel asks for where the device allows (opt-in beyond 48 KB): 16
# channels per chunk with two window buffers take ~68 KB on the benchmark layer, three blocks
# per H100 multiprocessor; 8 channels (what fits 48 KB) measured 0.124 ms against 0.103 ms.
SMEM_MOST = 96 * 1024


@dataclass(frozen=True)
class FusedPlan:
    """Launch shape of ``separable_fused``: TH x TW output tiles (TW a multiple of 4), KG x KT
    pointwise outputs per block (KG groups of KT per thread), ``cc_chunk`` channels staged at a
    time in windows of at most ``rows_max`` x ``pitch``."""

    kf: int          # 3: the fixed 3x3 unit-stride variant, 0: any kernel
    kt: int
    kg: int
    kp_blocks: int
    th: int
    tw: int
    tiles_h: int
    tiles_w: int
    cc_chunk: int
    rows_max: int
    pitch: int
    smem: int


def _round4(v: int) -> int:
    return 4 * math.ceil(v / 4)


def _split(extent: int, most: int, multiple: int = 1) -> tuple[int, int]:
    """(tile, tiles): ``extent`` split into equal tiles of at most ``most`` (a multiple of
    ``multiple``) so no edge tile is mostly idle."""
    tiles = math.ceil(extent / most)
    tile = math.ceil(extent / tiles)
    return multiple * math.ceil(tile / multiple), tiles


def smem_limit(device: int) -> int:
    """The fused kernel's shared-memory budget on ``device``."""
    return device_smem_limit(device, SMEM_MOST)


@memoized(1024)
def fused_plan(dw: ConvGeometry, kp: int, smem_budget: int = SMEM_LIMIT) -> FusedPlan | None:
    """The fused kernel's launch for depthwise problem ``dw`` followed by ``kp`` pointwise outputs
    within ``smem_budget`` bytes of shared memory, or None where it cannot run (3-d, or a window
    too large for shared memory)."""
    if dw.ndim == 3:
        return None
    g3 = dw.as_3d()
    _, oh, ow = g3["out_spatial"]
    _, kh, kw = g3["kernel"]
    _, sh, sw = g3["stride"]
    _, dh, dwl = g3["dilation"]
    tw, tiles_w = _split(ow, MAX_TILE_W if oh > 1 else MAX_PIXELS, 4)
    th, tiles_h = _split(oh, max(1, MAX_PIXELS // tw))
    pixel_groups = th * tw // 4
    kg_most = THREADS // pixel_groups
    kt = next((k for k in SEPARABLE_KT if k * kg_most >= kp), SEPARABLE_KT[-1])
    kg = min(kg_most, math.ceil(kp / kt))
    rows_max = (th - 1) * sh + (kh - 1) * dh + 1
    # room for the vector staging's shift of up to 3 columns and the 3x3 step's third 4-vector
    pitch = _round4((tw - 1) * sw + (kw - 1) * dwl + 1 + 3) + (4 if kh == kw == 3 else 0)
    acc = itemsize(compute_dtype(dw.dtype))
    item = itemsize(dw.dtype)
    for cc in (SEP_CC, 8, 4, 2, 1):
        # tile and weights in the accumulator type, two window buffers in x's type
        smem = ((cc * th * tw + _round4(cc * kh * kw) + _round4(cc * kg * kt)) * acc
                + 2 * cc * rows_max * pitch * item)
        if smem <= smem_budget:
            break
    else:
        return None
    kp_blocks = math.ceil(kp / (kg * kt))
    weights = max(kp, kh * kw) * dw.out_channels  # the kernel's 32-bit weight offsets
    if dw.batch * tiles_h * tiles_w >= 2 ** 31 or kp_blocks > GRID_YZ_MAX or weights >= 2 ** 31:
        return None
    kf = fixed_kernel(dw, (3,))
    return FusedPlan(kf, kt, kg, kp_blocks, th, tw, tiles_h, tiles_w, cc, rows_max, pitch, smem)


def fused_pays(dw: ConvGeometry, kp: int, smem_budget: int = SMEM_LIMIT) -> bool:
    plan = fused_plan(dw, kp, smem_budget)
    return plan is not None and plan.kp_blocks <= FUSED_MAX_KP_BLOCKS


@memoized(1024)
def _fused_launch(dw: ConvGeometry, kp: int, has_b_dw: bool, has_b_pw: bool, act, x_strides: tuple,
                  vec: bool, device: int) -> Launch:
    plan = fused_plan(dw, kp, smem_limit(device))
    g3 = dw.as_3d()
    fn = jit.get_function(separable_module(dw.dtype, plan.kt), "separable_fused", dw.dtype,
                          (plan.kt, plan.kf))
    return Launch(fn, (dw.batch * plan.tiles_h * plan.tiles_w, plan.kp_blocks), (THREADS,),
                  ints((has_b_dw, has_b_pw, ACTIVATIONS[act], dw.channels_last, dw.out_channels,
                        dw.out_channels // dw.in_channels, kp, *g3["spatial"][1:],
                        *g3["out_spatial"][1:], *g3["kernel"][1:], *g3["stride"][1:],
                        *g3["dilation"][1:], *g3["pad_lo"][1:]))
                  + int64s((x_strides[0], x_strides[1], x_strides[3], x_strides[4]))
                  + ints((plan.th, plan.tw, plan.tiles_h, plan.tiles_w, plan.kg, plan.cc_chunk,
                          plan.rows_max, plan.pitch, vec)), plan.smem, packed=True)


def run_fused(dw: ConvGeometry, x, w_dw, b_dw, w_pw, b_pw, act: str | None, y) -> None:
    """y = pointwise(act(depthwise(x, w_dw) + b_dw), w_pw) + b_pw in one kernel; y C-contiguous.
    The caller holds the arrays' device."""
    strides = element_strides(x, dw.channels_last)
    launch = _fused_launch(dw, w_pw.shape[0], b_dw is not None, b_pw is not None, act, strides,
                           not dw.channels_last and vector_rows(x, strides), y.data.device_id)
    # (Cm, taps) and (Kp, Cm) rows in memory
    launch(x, contiguous(w_dw), y if b_dw is None else b_dw, contiguous(w_pw),
           y if b_pw is None else b_pw, y)
