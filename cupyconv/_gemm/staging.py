"""The operands the implicit kernel reads in place of the caller's.

On the tensor-core loops x runs as a channels-last copy whose groups' channels are zero-padded to
whole 16-byte chunks (:func:`staged_channels`), or, for few-channel forward layers, width-unfolded
(:func:`unfolded_channels`: a kernel row's (tap, channel) columns become the channels), with the
weights reshaped and padded to match (:func:`staged_operands`).  Channels-first forward weights
are read as they are on small problems and as a transposed copy above (:func:`fprop_weight`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from cupyconv._core.copy import UNFOLD_MAX_WIDTH, contiguous, copy_into, unfold_width
from cupyconv._core.dtypes import itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import MATH_SIMT
from cupyconv._core.launch import element_strides
from cupyconv._core.precision import gemm_math
from cupyconv._core.program import scratch, zero_fill
from cupyconv._gemm.kernel_args import ImplicitConv
from cupyconv._gemm.plans import GEMM_RATE, LAUNCH_S, GemmPlan


# Reading channels-first weights in the kernel (strided, scalar loads) made the implicit GEMM
# 12-17 % slower on ResNet-50 at batch 32 (H100, benchmarks/notes/gemm.md, "Issue 15"); the
# transposed copy costs one launch.  The kernel reads them itself on problems whose GEMM takes
# less than about LAUNCH_S / 0.15 (all of ResNet-50's layers at batch 1), and gets the copy above
# that.
_W_CF_MAX_FLOPS = LAUNCH_S / 0.15 * GEMM_RATE


def fprop_weight(geom: ConvGeometry, w):
    """``(weights, channels_first)`` as the implicit kernel reads them: C-contiguous (K, taps, Cg)
    (channels-last weights, or a transposed copy of channels-first ones), or, on small problems,
    C-contiguous channels-first (K, Cg, *kernel), which the kernel's weight loader reads in
    (tap, c) order itself."""
    w = contiguous(w)
    if geom.channels_last:
        return w, False
    k, cg = w.shape[:2]
    wt = w.reshape(k, cg, -1).transpose(0, 2, 1)
    if wt.flags.c_contiguous:  # one tap: (K, 1, Cg) is w itself
        return wt, False
    if geom.flops <= _W_CF_MAX_FLOPS:
        return w, True
    # (a copy per call: weights change in place between calls, e.g. in training)
    return contiguous(wt), False


# Experiment switch for benchmarks/experiments/exp_stage_nchw.py: None lets staged_channels decide; True
# (False) stages (never stages) channels-first x with whole chunks on the tensor-core loops.
STAGE_CF_X: bool | None = None


def staged_channels(prob: ImplicitConv, plan: GemmPlan | None, device_id: int) -> int:
    """The channels per group of the channels-last copy of x that ``prob`` runs on (y keeps its
    layout), or 0 where it runs on x as it is.  Only on the tensor-core loops, whose multistage
    copies move 16-byte chunks of channels straight to shared memory; the register-staged loop
    they fall back to otherwise gathers single elements.

    - Channels-last groups whose channels are not whole chunks (ResNet's 3-channel conv1) run on
      a copy zero-padded to whole chunks (zero weights for the padding): conv1 TF32 0.53 -> 0.35
      ms, fp16 0.33 -> 0.29 ms (H100, benchmarks/notes/gemm.md, "Issue 16, session 3").
    - Channels-first x (padded the same way) with a kernel larger than 1x1: the copy (a tiled
      transpose) costs less than the multistage loop saves: ResNet-50 3x3 layers at batch 32,
      forward fp16 0.13-0.28 -> 0.07-0.11 ms, TF32 0.17-0.20 -> 0.12-0.18 ms, backward-data
      alike (H100, benchmarks/experiments/exp_stage_nchw.py).  1x1 layers read x as it is: a stride-2 1x1
      reads a quarter of x, which the copy would move whole (TF32 0.149 -> 0.198 ms), and
      backward-data's 1x1 phases lost (0.08 -> 0.20 ms)."""
    math_kind = plan.math if plan is not None else gemm_math(prob.dtype, prob.precision, device_id)
    if math_kind == MATH_SIMT:
        return 0
    cg = prob.in_channels // prob.groups
    chunk = 16 // itemsize(prob.dtype)
    padded = -(-cg // chunk) * chunk
    if not prob.channels_last:
        stage = math.prod(prob.kernel) > 1 if STAGE_CF_X is None else STAGE_CF_X
        if stage:
            return padded
    return padded if padded != cg else 0


# Width unfolding (the forward pass of layers whose channels are not whole chunks): the columns
# (tap along W, channel) of one output pixel's kernel row become the channels of a staged copy
# of x (one unfold_width launch), and the kernel keeps its other dims with width 1.  ResNet-50's
# conv1 (3 channels, 7x7) then reads K = 7 x 24 instead of 49 x 8 (fp16: 8-channel chunks):
# 0.279 -> 0.214 ms at batch 32, a one-channel 80-tap 1-d layer 0.25 -> 0.16 ms, 5x5 and 3x3x3
# one-channel layers 1.2-1.4x faster; TF32 conv1 (K 7 x 24 against 49 x 4) and VGG's TF32 3x3
# on 3 channels (no K saved) gain nothing (H100, benchmarks/experiments/exp_unfold.py).  Used where it
# shrinks K by UNFOLD_GAIN or more; UNFOLD_W, the experiment switch, forces it on or off.
UNFOLD_GAIN = 1.5
UNFOLD_W: bool | None = None


def unfolded_channels(prob: ImplicitConv, cg_to: int) -> int:
    """Channels per pixel of the width-unfolded copy of x that ``prob`` (staged to ``cg_to``
    channels) runs on (the kernel width's taps times the channels, padded to whole 16-byte
    chunks), or 0 where it runs on the channel-padded copy."""
    kw, cg = prob.kernel[2], prob.in_channels // prob.groups
    if prob.groups != 1 or kw == 1 or cg == cg_to:
        return 0
    chunk = 16 // itemsize(prob.dtype)
    width = -(-kw * cg // chunk) * chunk
    # (the unfolding kernel indexes a row's columns in 32 bits and tabulates them)
    if prob.out_spatial[2] * width >= 2 ** 30 or width > UNFOLD_MAX_WIDTH:
        return 0
    if UNFOLD_W is not None:
        return width if UNFOLD_W else 0
    return width if width * UNFOLD_GAIN <= kw * cg_to else 0


def _unfolded(prob: ImplicitConv, x, wt, w_cf: bool, width: int):
    """``prob`` on the width-unfolded copy of x (:func:`copy.unfold_width`: channels-last,
    ``width`` channels per output column, x[..., ow * SW + j * DW - PW, c] at channel j * C + c)
    and its weights as (K, taps / KW, width) to match."""
    k_out, c = prob.out_channels, prob.in_channels
    kw = prob.kernel[2]
    x_u = unfold_width(x, element_strides(x, prob.channels_last), prob.spatial,
                       prob.out_spatial[2], kw, prob.stride[2], prob.dilation[2], prob.pad_lo[2],
                       width)
    rows = math.prod(prob.kernel[:2])
    w_src = (wt.reshape(k_out, c, rows, kw).transpose(0, 2, 3, 1) if w_cf
             else wt.reshape(k_out, rows, kw, c))
    w_u = scratch((k_out, rows, width), wt.dtype)
    if width > kw * c:
        zero_fill(w_u)
    copy_into(w_src, _split_last(w_u, kw, c))
    unfolded = replace(prob, channels_last=True, in_channels=width,
                       spatial=prob.spatial[:2] + (prob.out_spatial[2],),
                       kernel=prob.kernel[:2] + (1,), stride=prob.stride[:2] + (1,),
                       dilation=prob.dilation[:2] + (1,), pad_lo=prob.pad_lo[:2] + (0,),
                       out_channels_last=prob.y_channels_last)
    return unfolded, x_u, w_u, False


def _split_last(a, parts: int, size: int):
    """The first ``parts * size`` elements of C-contiguous ``a``'s last dim, as a view with that
    dim split into (parts, size)."""
    from cupy.lib.stride_tricks import as_strided

    return as_strided(a, a.shape[:-1] + (parts, size),
                      a.strides[:-1] + (size * a.itemsize, a.itemsize))


def channels_last_copy(x, channels_last: bool, groups: int, cg_to: int):
    """x (channels-first or channels-last) as a C-contiguous channels-last copy whose groups'
    channels are zero-padded to ``cg_to`` each."""
    import cupy

    x_l = x if channels_last else cupy.moveaxis(x, 1, -1)
    cg = x_l.shape[-1] // groups
    if cg == cg_to:
        return contiguous(x_l)
    out = scratch(x_l.shape[:-1] + (groups * cg_to,), x.dtype)
    zero_fill(out)
    copy_into(x_l.reshape(x_l.shape[:-1] + (groups, cg)),
              out.reshape(out.shape[:-1] + (groups, cg_to))[..., :cg])
    return out


def padded_last_dim(a, size: int):
    """C-contiguous ``a`` with its last dim zero-padded to ``size`` (itself where it has it)."""
    if a.shape[-1] == size:
        return contiguous(a)
    out = scratch(a.shape[:-1] + (size,), a.dtype)
    zero_fill(out)
    copy_into(a, out[..., :a.shape[-1]])
    return out


def _staged(prob: ImplicitConv, x, wt, w_cf: bool, cg_to: int):
    """``prob`` on the channels-last copy of x with ``cg_to`` channels per group, and its
    weights as (K, taps, cg_to), zero for the padding channels."""
    if w_cf:
        k_out, cg = wt.shape[:2]
        wt = wt.reshape(k_out, cg, -1).transpose(0, 2, 1)
    x_l = channels_last_copy(x, prob.channels_last, prob.groups, cg_to)
    staged = replace(prob, channels_last=True, in_channels=prob.groups * cg_to,
                     out_channels_last=prob.y_channels_last)
    return staged, x_l, padded_last_dim(wt, cg_to), False


def staged_operands(prob: ImplicitConv, x, wt, w_cf: bool, cg_to: int):
    """``(prob, x, wt, w_cf)`` of ``prob`` run on a staged copy of x with ``cg_to`` channels per
    group (:func:`staged_channels`): width-unfolded where :func:`unfolded_channels` takes it, else
    channel-padded."""
    width = unfolded_channels(prob, cg_to)
    if width:
        return _unfolded(prob, x, wt, w_cf, width)
    return _staged(prob, x, wt, w_cf, cg_to)
