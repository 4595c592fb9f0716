"""Channels-last convolutions on the TMA-fed Hopper kernel (``_gemm/tma.py``).

A 1x1 convolution with unit stride and no padding over channels-last activations is one dense
GEMM over the pixels: forward y[P, K] = x[P, C] @ w[K, C]^T, backward-data dx[P, C] =
dy[P, K] @ w[K, C] (w read as it is: an MN-major B, no transposed copy).  On Hopper,
16-bit, those run on the TMA-fed, warp-specialized kernel, faster than the loops they ran on
before (the dense GEMM for the forward, the implicit GEMM for the gradients).  Routed through
cupyconv's calls against ``CUPYCONV_TMA=0`` (H200, bf16, batch 32, 20 ResNet-50 /
EfficientNet-B0 / ConvNeXt-T layers, ``exp_tma_1x1.py``; benchmarks/notes/gemm.md, session 31):
forward 1.03-1.76x but 0.95x on 240->40 at 28^2 (by 0.5 us), backward-data 1.2-2.7x,
backward-weight 1.2-2.1x (1.0x on the two 7^2 layers).  (Before the kernel's epilogue went
through shared memory, session 29, forward lost where a tile has one or two k slices and a wide
output, 64->256 at 56^2 54.8 against 42.8 us, and was routed only from 256 input channels or
below 64 outputs; it now takes 24.4 us there.)

Backward-weight of the same problems is dw[K, C] = dy[P, K]^T @ x[P, C]: both operands
MN-major, the reduction over the pixels long and the output small, so the kernel splits k
(its fp32 parts summed in order by the split-K reduction) until the work units fill the GPU.
How many parts every pass takes is ``_gemm/tma_splits.py``'s estimate.

Every other channels-last 2-d forward (3x3, strided, dilated, asymmetric padding) runs on the
kernel's im2col mode (:func:`im2col_forward`): TMA gathers each tap's window of input pixels
itself, zeros for the padding, so the producer issues one copy per k slice and no address
arithmetic reaches the consumers.

No epilogue options (bias, activation, residual) and no grouped problems (unless the
dispatcher merged the groups into one, with block-diagonal weights): those stay on the other
loops.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.copy import contiguous
from cupyconv._core.dtypes import dtype_name
from cupyconv._core.launch import sm_count
from cupyconv._core.program import zero_fill
from cupyconv._gemm.kernel_args import ImplicitConv, OutMap
from cupyconv._gemm.tma import (IM2COL_CORNER, TF32, TMA_ALIGN, check_pair,
                                output_tiles, persistent_launch, prepare_gemm_tma, runs_here,
                                runs_on_tma, split_parts, takes_dtype, tma_enabled)
from cupyconv._gemm.tma_splits import (CONV_TILE, IM2COL_SLICE_S, conv_tile, few_tile_splits,
                                       weight_splits)


def pointwise_gemm(prob: ImplicitConv, x, b, y) -> bool:
    """Run ``prob`` (forward or a backward-data phase) as ``y = x @ b`` on the TMA kernel where
    it applies (with split-K where the output has few tiles: ``tma_splits.few_tile_splits``), and
    return whether it did.
    ``x`` and ``y`` are the activations (C-contiguous, channels-last), ``b`` the weight as a
    (k, n) matrix view (either orientation: :func:`cupyconv._gemm.tma.check_operands`).  The
    caller has ruled out epilogue options and forced plans."""
    if not _is_plain_pointwise(prob, x, y):
        return False
    m, n, k, _ = prob.gemm
    a, c = x.reshape(m, k), y.reshape(m, n)
    tile = conv_tile(prob.dtype, n)
    splits = few_tile_splits(output_tiles(m, n, tile), math.ceil(k / tile[2]),
                             sm_count(c.data.device_id), m * n)
    # (the device and tile count first: the TF32 copy below is made only for a launch)
    if not splits or not (tma_enabled() and runs_here(c.data.device_id)):
        return False
    if prob.dtype == TF32 and b.strides[0] != b.itemsize:
        # (TF32 reads B K-major: backward-data's weight, MN-major, as a transposed copy; the
        # weight is small against the activations)
        b = contiguous(b.T).T
    if not runs_on_tma(a, b, c, tile, prob.precision):  # (also where rows break 16 bytes)
        return False
    prepare_gemm_tma(a, b, c, tile=tile, splits=splits)[0]()
    return True


def pointwise_weight_gemm(prob: ImplicitConv, x, dy, dw) -> bool:
    """Backward-weight of ``prob`` (see :func:`pointwise_gemm`) as ``dw = dy^T @ x`` on the TMA
    kernel with split-K where it applies; returns whether it ran.  ``dw`` C-contiguous, (K, C)
    as a matrix in either layout."""
    if not _is_plain_pointwise(prob, x, dy) or not dw.flags.c_contiguous:
        return False
    pixels, k_out, c_in = prob.gemm[0], prob.out_channels, prob.in_channels
    launch = prepare_weight_gemm(dy.reshape(pixels, k_out).T, x.reshape(pixels, c_in),
                                 dw.reshape(k_out, c_in))
    if launch is None:
        return False
    launch()
    return True


def prepare_weight_gemm(a, b, c):
    """The launch of a backward-weight product ``c = a @ b`` (``a`` dy^T, its k the pixels) on
    the TMA kernel with ``tma_splits.conv_tile``'s tile for c's columns, split by
    ``tma_splits.weight_splits``, prepared (nothing launched yet); None where it does not apply
    (operands TMA cannot read, too few work units)."""
    (m, k), n = a.shape, c.shape[1]
    tile = conv_tile(dtype_name(a.dtype), n)
    if not runs_on_tma(a, b, c, tile):
        return None
    splits = weight_splits(m, n, k, sm_count(c.data.device_id), tile=tile)
    if splits is None:
        return None
    return prepare_gemm_tma(a, b, c, tile=tile, splits=splits)[0]


def _is_plain_pointwise(prob: ImplicitConv, x, y) -> bool:
    """A 1x1, unit-stride, unpadded, ungrouped channels-last problem of C-contiguous
    activations ``x`` and ``y`` (input and output of the GEMM) in a dtype the TMA kernel takes
    at the problem's precision (:func:`cupyconv._gemm.tma.takes_dtype`)."""
    if not takes_dtype(prob.dtype, prob.precision):
        return False
    if (prob.groups != 1 or any(v != 1 for v in prob.kernel + prob.stride)
            or any(prob.pad_lo) or prob.out_spatial != prob.spatial):
        return False
    return (prob.channels_last and prob.y_channels_last and x.flags.c_contiguous
            and y.flags.c_contiguous)


# ------------------------------------------------------------------ im2col mode
def im2col_forward(geom, x, w, y) -> bool:
    """Run the forward convolution ``geom`` (no epilogue options: the caller checked) on the TMA
    kernel's im2col mode where it applies (:func:`_im2col_splits`), and return whether it did.
    On the 3x3 and strided layers of ResNet-50 and ConvNeXt-T's downsampling (bf16, batch 32,
    H200, operands rotated past L2; benchmarks/notes/gemm.md, session 31) it ran 1.13-2.0x the
    implicit loop, equal on 3x3 64 -> 64 at 56^2."""
    splits = _im2col_splits(geom, y.data.device_id, geom.out_spatial, geom.out_channels,
                            geom.in_channels, tf32=True)
    if not splits:
        return False
    return _run_im2col(x, w, y, stride=geom.stride, padding=geom.pad_lo,
                       dilation=geom.dilation, out_hw=tuple(geom.out_spatial), splits=splits)


def im2col_backward_data(geom, dy, w, dx) -> bool:
    """Run backward-data of the stride-1 convolution ``geom`` (no bias: the caller checked) on
    the TMA kernel's im2col mode as a forward over dy (the filter turned half a turn, padded by
    its dilated reach minus the convolution's padding) where it applies, and return whether it
    did.  On ResNet-50's stride-1 3x3 layers (bf16, batch 32, H200, operands rotated past L2;
    benchmarks/notes/gemm.md, session 32) it ran 1.20-1.61x the implicit loop."""
    if any(s != 1 for s in geom.stride):
        return False
    splits = _im2col_splits(geom, dx.data.device_id, geom.spatial, geom.in_channels,
                            geom.out_channels)
    if not splits:
        return False
    reach = tuple(d * (k - 1) for d, k in zip(geom.dilation, geom.kernel))
    return _run_im2col(dy, w, dx, stride=(1, 1),
                       padding=tuple(r - p for r, p in zip(reach, geom.pad_lo)),
                       dilation=geom.dilation, out_hw=tuple(geom.spatial), data=True,
                       splits=splits)


def im2col_phases(geom, plan, dy, dx, phase_weight) -> bool:
    """Run backward-data of the strided convolution ``geom`` (no bias: the caller checked) on
    the TMA kernel's im2col mode, one launch per stride phase of ``plan``
    (``_gemm/backward.phase_plan``: each phase a stride-1 forward convolution of dy with its
    taps, ``phase_weight(phase)`` its (C, taps, K) weights, flipped and selected), its output
    rows written straight into the phase's rows of dx (a strided view: the epilogue's row
    pitches; rows no phase reaches are zero-filled first); returns whether it ran.  Every
    phase is checked before anything of dx is written: where one does not apply (few output
    tiles, a window TMA cannot describe), nothing runs but the weights' copies, and the caller
    takes the implicit loop."""
    if all(s == 1 for s in geom.stride) or len(geom.spatial) != 2:
        return False
    device = dx.data.device_id
    parts = []
    for ph in plan.phases:
        prob = ph.prob
        splits = _im2col_splits(geom, device, prob.out_spatial[1:], geom.in_channels,
                                geom.out_channels, taps=math.prod(prob.kernel))
        if not splits:
            return False
        parts.append((ph, splits))
    launches = []
    for ph, splits in parts:
        prob = ph.prob
        w = phase_weight(ph).reshape((geom.in_channels,) + prob.kernel[1:]
                                     + (geom.out_channels,))
        try:  # (the epilogue writes the phase's rows of dx through their pitches)
            launch = prepare_im2col(dy, w, dx[ph.window], stride=(1, 1),
                                    padding=prob.pad_lo[1:], dilation=prob.dilation[1:],
                                    out_hw=prob.out_spatial[1:], splits=splits)[0]
        except (TypeError, ValueError):  # (a window TMA cannot take)
            return False
        launches.append(launch)
    if plan.zero_fill:
        zero_fill(dx)
    for launch in launches:
        launch()
    return True


def im2col_backward_weight(geom, x, dy, dw) -> bool:
    """Run backward-weight of ``geom`` (2-d, channels-last, 16-bit, one group, input channels a
    multiple of 64) as dw[K, taps x C] = dy^T @ im2col(x) on the TMA kernel, x read through
    the im2col mode, with split-K over the pixels, where it applies; returns whether it did.
    On the layers of exp_tma_im2col (bf16, batch 32, H200, operands rotated past L2;
    benchmarks/notes/gemm.md, session 33) it ran 1.74-2.53x the implicit loop."""
    if not _takes_im2col_mode(geom, dw.data.device_id) or geom.in_channels % 64:
        return False
    try:
        launch = prepare_im2col_weight(x, dy, dw, stride=geom.stride, padding=geom.pad_lo,
                                       dilation=geom.dilation)[0]
    except (TypeError, ValueError):  # (views, channels, alignment, too few work units)
        return False
    launch()
    return True


def prepare_im2col_weight(x, dy, dw, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                          tile=CONV_TILE):
    """Backward-weight of a channels-last convolution on the TMA kernel, prepared once:
    dw[K, taps x C] = dy[P, K]^T @ im2col(x)[P, taps x C], A read MN-major from dy as it is,
    B through TMA's im2col mode (per k slice, BK output pixels x 64 channels of one tap per
    64-column block), split-K over the pixels P (fp32 parts summed in order).  ``x`` (N, H, W,
    C), ``dy`` (N, OH, OW, K), ``dw`` (K, R, S, C), all C-contiguous float16 / bfloat16, C a
    multiple of 64, K of 8; ``padding`` the top / left padding (the bottom / right ones follow
    from dy's plane).  Raises TypeError / ValueError (before anything is compiled or launched)
    where the kernel cannot take it, also where split-K cannot fill half the multiprocessors.
    Returns ``(launch, dw)``."""
    import cupy

    from cupyconv._core import jit
    from cupyconv._core.arrays import require_array, same_device
    from cupyconv._core.kernels import TMA_B_IM2COL, TMA_TILES, gemm_tma_module
    from cupyconv._core.program import AddressArg
    from cupyconv._gemm.tma import _driver, _require_hopper, map_encoder

    x, dy, dw = require_array(x, "x"), require_array(dy, "dy"), require_array(dw, "dw")
    tile = tuple(tile)
    if tile not in TMA_TILES:
        raise ValueError(f"tile must be one of {TMA_TILES}, got {tile}")
    if dy.ndim != 4:
        raise ValueError(f"dy must be 4-D (channels-last), got {dy.ndim}-D")
    # (the forward's checks, with dw standing for w and dy for the forward's output)
    f = check_im2col(x, dw, stride, padding, dilation, dy, out_hw=tuple(dy.shape[1:3]))
    same_device({"x": x, "dy": dy, "dw": dw})
    bm, bn, bk, _ = tile
    dtype, c, k, item = f["dtype"], f["c"], f["k"], f["itemsize"]
    if c % 64:
        raise ValueError(f"x has {c} channels: backward-weight on the im2col mode takes "
                         f"multiples of 64 (whole 64-channel boxes of dw's columns)")
    if k % 8:
        raise ValueError(f"dy has {k} channels: TMA needs 16-byte rows (a multiple of 8)")
    taps, pixels = f["r"] * f["s"], f["m"]
    n_cols = taps * c
    device = x.device.id
    splits = weight_splits(k, n_cols, pixels, sm_count(device), IM2COL_SLICE_S)
    if splits is None:
        raise ValueError(f"too few work units for the TMA kernel ({k} x {n_cols} outputs over "
                         f"{pixels} pixels)")
    with cupy.cuda.Device(device):
        _require_hopper(device)
        _driver()
        map_a = AddressArg(dy, map_encoder(dy.reshape(pixels, k), bk, 64))
        map_b = _im2col_map(x, f, 64, bk)
        geo = _im2col_geometry(f, c // 64, 0, 1)
        out = dw.reshape(k, n_cols)
        splits, ws, c_vec, reduce = split_parts(dtype, out, k, n_cols, n_cols,
                                                math.ceil(pixels / bk), splits)
        fn = jit.get_function(gemm_tma_module(dtype, tile, TMA_B_IM2COL), "gemm_tma", dtype,
                              (0,))
        args = (map_a, map_b, out, np.int32(k), np.int32(n_cols), np.int32(pixels),
                np.int64(n_cols), np.int32(c_vec), np.int32(splits), ws, geo)
        launch = persistent_launch(fn, tile, item, output_tiles(k, n_cols, tile) * splits,
                                   device, args, reduce)
        return launch, dw


def _im2col_map(x, f: dict, channels: int, pixels: int):
    """The im2col tensor map of the channels-last activation ``x`` (:func:`check_im2col`'s
    facts ``f``: its shape, the pixel window, the stride) for boxes of ``pixels`` output pixels
    x ``channels`` channels, as an ``AddressArg`` (a replay re-encodes it for its operand).
    x is (C, W, H, N), innermost first."""
    from cupyconv._core.program import AddressArg
    from cupyconv._gemm.tma import encoded_im2col

    c, item = f["c"], f["itemsize"]
    dims = (c, f["w"], f["h"], f["n"])
    strides = (c * item, f["w"] * c * item, f["h"] * f["w"] * c * item)
    sh, sw = f["stride"]
    return AddressArg(x, lambda ptr: encoded_im2col(
        ptr, f["dtype"], dims, strides, f["lower"], f["upper"], channels, pixels,
        (1, sw, sh, 1)))


def _im2col_geometry(f: dict, cblocks: int, wtap0: int, wtap_step: int,
                     out_pitches=(0, 0, 0)):
    """The kernel's Im2colGeometry of :func:`check_im2col`'s facts ``f``: ``cblocks`` blocks of
    channels per tap, weight tap ``wtap0 + wtap_step t`` for window tap t, output rows placed
    through ``out_pitches`` (image, row, pixel; zeros: dense rows)."""
    from cupyconv._gemm.tma import im2col_geometry

    (sh, sw), (ph, pw), (dh, dw) = f["stride"], f["padding"], f["dilation"]
    return im2col_geometry(oh=f["oh"], ow=f["ow"], sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw,
                           kw=f["s"], cblocks=cblocks, wtap0=wtap0, wtap_step=wtap_step,
                           out_image=out_pitches[0], out_row=out_pitches[1],
                           out_col=out_pitches[2])


def _takes_im2col_mode(geom, device_id: int, tf32: bool = False) -> bool:
    """The rules of the im2col mode that the arrays do not decide (:func:`check_im2col` checks
    those): Hopper with cuda-bindings and ``CUPYCONV_TMA`` not 0, float16 / bfloat16 (or, with
    ``tf32``, for the forward, whose weight is K-major, float32 at TF32), 2-d, one group
    (grouped problems merged into one by block-diagonal weights too), channels-last."""
    return (takes_dtype(geom.dtype, geom.precision if tf32 else "exact")
            and geom.groups == 1 and geom.channels_last
            and len(geom.spatial) == 2 and tma_enabled() and runs_here(device_id))


def _im2col_splits(geom, device_id: int, plane, channels: int, reduced: int,
                   taps: int | None = None, tf32: bool = False) -> int:
    """The split-K parts the im2col mode runs ``geom`` with (0: it does not take it): where
    :func:`_takes_im2col_mode` (``tf32``: see there), the parts from
    ``tma_splits.few_tile_splits`` for the output ``plane`` x ``channels`` over ``taps``
    (default ``geom``'s) x blocks of the ``reduced`` channels."""
    if not _takes_im2col_mode(geom, device_id, tf32):
        return 0
    tile = conv_tile(geom.dtype, channels)
    pixels = geom.batch * math.prod(plane)
    tiles = output_tiles(pixels, channels, tile)
    taps = math.prod(geom.kernel) if taps is None else taps
    slices = taps * math.ceil(reduced / tile[2])
    return few_tile_splits(tiles, slices, sm_count(device_id), pixels * channels,
                           IM2COL_SLICE_S)


def _run_im2col(a, w, out, **options) -> bool:
    """:func:`prepare_im2col` and launch where its checks pass; whether it ran."""
    try:
        launch = prepare_im2col(a, w, out, **options)[0]
    except (TypeError, ValueError):  # (views, channels, alignment, windows TMA cannot take)
        return False
    launch()
    return True


def check_im2col(x, w, stride, padding, dilation, out=None, out_hw=None,
                 data: bool = False) -> dict:
    """Check a channels-last convolution for the TMA kernel's im2col mode from the arrays'
    dtype, shape, strides and address alone (testable without a GPU); raises TypeError /
    ValueError naming the argument.

    The forward: ``x`` (N, H, W, C) and ``w`` (K, R, S, C), ``out`` (N, OH, OW, K).  With
    ``data``, backward-data as a forward over dy: ``x`` is dy (N, OH, OW, K), ``w`` the
    convolution's (K, R, S, C), ``out`` dx (N, H, W, C), ``padding`` the dilated filter's reach
    minus the convolution's padding, ``stride`` 1.  Both float16 or bfloat16 (the forward also
    float32: TF32 products), C-contiguous, 16-byte aligned, with 16-byte channel rows (multiples
    of 8 channels, 4 of float32); ``out`` C-contiguous, or a view whose channels are (a stride
    phase's rows of dx: :func:`_row_pitches`).
    ``padding``: the top / left padding; ``out_hw``: the output plane where the bottom / right
    padding differs (default: the same padding on both sides).  Returns the launch facts, with
    ``c`` the reduction's channels (x's) and ``k`` the output's, and ``out_pitches`` (None: a
    C-contiguous out)."""
    # (TF32 reads both operands K-major: the forward's w [K][taps][C] is, backward-data's is not)
    dtype = check_pair({"x": x, "w": w}, 4, "4-D (channels-last)", tf32=not data)
    per_chunk = 16 // x.dtype.itemsize  # channels per 16 bytes
    n, h, wd, c = (int(v) for v in x.shape)
    wk, r, s, wc = (int(v) for v in w.shape)
    k, reduced = (wc, wk) if data else (wk, wc)
    if reduced != c:
        raise ValueError(f"w has {reduced} {'output' if data else 'input'} channels, "
                         f"{'dy' if data else 'x'} has {c}")
    for name, channels in (("x", c),) + ((("w", k),) if data else ()):
        if channels % per_chunk:
            raise ValueError(f"{name} has {channels} channels: TMA needs 16-byte channel rows (a "
                             f"multiple of {per_chunk})")
    (sh, sw), (ph, pw), (dh, dw) = (tuple(int(v) for v in t) for t in (stride, padding, dilation))
    if data and (sh, sw) != (1, 1):
        raise ValueError(f"backward-data on the im2col mode takes stride 1, got {stride}")
    if out_hw is None:
        oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        ow = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    else:
        oh, ow = (int(v) for v in out_hw)
    if oh < 1 or ow < 1:
        raise ValueError(f"the output would be empty ({oh} x {ow})")
    itemsize = x.dtype.itemsize
    for name, a in (("x", x), ("w", w)):
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous for the TMA kernel's im2col mode")
        if int(a.data.ptr) % TMA_ALIGN:
            raise ValueError(f"{name} must start 16-byte aligned for TMA")
    # the pixel window at filter offset 0: the first output pixel's top-left tap at (-ph, -pw),
    # the last one's at ((oh - 1) sh - ph, (ow - 1) sw - pw), as corners relative to the
    # tensor's first and last pixel
    lower = (-pw, -ph)
    upper = ((ow - 1) * sw - pw - (wd - 1), (oh - 1) * sh - ph - (h - 1))
    lo, hi = IM2COL_CORNER
    if not all(lo <= v <= hi for v in lower + upper):
        raise ValueError(f"padding or stride out of the im2col window's range ({lower}, {upper}: "
                         f"each corner {lo}..{hi})")
    # (the filter offsets, up to (r - 1) dh, are 0..255: the upper corner, about padding minus
    # that reach, leaves the corner range first)
    if max(sh, sw) > 8:
        raise ValueError(f"stride {stride}: the im2col traversal strides go up to 8")
    m = n * oh * ow
    if m >= 2**31 or n * h * wd * c >= 2**40:
        raise ValueError("problem too large for the TMA kernel's 32-bit pixel indices")
    if out is not None:
        if tuple(out.shape) != (n, oh, ow, k) or dtype_name(out.dtype) != dtype:
            raise ValueError(f"out must be {dtype} of shape {(n, oh, ow, k)}, got "
                             f"{dtype_name(out.dtype)} {tuple(out.shape)}")
        out_pitches = _row_pitches(out, itemsize)
    else:
        out_pitches = None
    return {"dtype": dtype, "n": n, "h": h, "w": wd, "c": c, "k": k, "r": r, "s": s,
            "oh": oh, "ow": ow, "stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw),
            "lower": lower, "upper": upper, "m": m, "itemsize": itemsize, "data": data,
            "out_pitches": out_pitches}


def _row_pitches(out, itemsize: int):
    """None for a C-contiguous ``out`` (N, OH, OW, K); else the element pitches of its images,
    rows and pixels, where its channels are contiguous and the pitches positive multiples of 8
    elements (16 bytes), under 2^31 (a stride phase's rows of dx: every s-th row and column);
    ValueError otherwise."""
    if out.flags.c_contiguous:
        return None
    strides = tuple(int(v) for v in out.strides)
    if strides[3] != itemsize or any(v <= 0 or v % itemsize for v in strides[:3]):
        raise ValueError("out must be C-contiguous, or a view with contiguous channels and "
                         "positive pitches (a stride phase's rows)")
    pitches = tuple(v // itemsize for v in strides[:3])
    per_chunk = 16 // itemsize
    if max(pitches) >= 2**31 or any(p % per_chunk for p in pitches):
        raise ValueError(f"out's pitches must be multiples of {per_chunk} elements (16 bytes) "
                         f"below 2^31")
    return pitches


def prepare_im2col(x, w, out=None, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                   out_hw=None, data: bool = False, tile=None, splits: int = 1):
    """A channels-last convolution on the TMA kernel's im2col mode, prepared once (checks,
    tensor maps, kernel): returns ``(launch, out)``.  The arrays and options as for
    :func:`check_im2col`, which runs before anything is compiled or launched; ``tile`` one of
    the dtype's (``tma.kernel_tiles``; default ``tma_splits.conv_tile`` for the output's
    channels).

    The forward is the GEMM out[P, K] = im2col(x)[P, taps x C] @ w[K, taps x C]^T, its k slices
    one tap's BK channels each (a tap's last block zero-filled past C on both operands).  With
    ``data``, dx[P, C] = im2col(dy)[P, taps x K] @ w'[taps x K, C], w' the filter turned half a
    turn (window tap t reads weight tap taps - 1 - t), read MN-major from w as it is: no
    transposed copy.  ``splits`` > 1 splits the k slices into that many parts (fewer where
    parts would be empty), their fp32 sums added in part order (``splitk_reduce.cu``): for
    outputs of few tiles.  Hopper with cuda-bindings only."""
    import cupy

    from cupyconv._core import jit
    from cupyconv._core.arrays import require_array, same_device
    from cupyconv._core.kernels import TMA_A_IM2COL, gemm_tma_module
    from cupyconv._core.program import AddressArg
    from cupyconv._gemm.tma import _driver, _require_hopper, encoded_tiled, kernel_tiles

    if not isinstance(splits, int) or splits < 1:
        raise ValueError(f"splits must be a positive int, got {splits!r}")
    x, w = require_array(x, "dy" if data else "x"), require_array(w, "w")
    if out is not None:
        out = require_array(out, "out")
    f = check_im2col(x, w, stride, padding, dilation, out, out_hw, data)
    tiles = kernel_tiles(f["dtype"])
    tile = conv_tile(f["dtype"], f["k"]) if tile is None else tuple(tile)
    if tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {f['dtype']}, got {tile}")
    same_device({"x": x, "w": w, "out": out})
    bm, bn, bk, _ = tile
    dtype, c, k, item = f["dtype"], f["c"], f["k"], f["itemsize"]
    cblocks, taps = math.ceil(c / bk), f["r"] * f["s"]
    device = x.device.id
    with cupy.cuda.Device(device):
        _require_hopper(device)
        _driver()
        if out is None:
            out = cupy.empty((f["n"], f["oh"], f["ow"], k), dtype=x.dtype)
        # x through the im2col map; w (K, R, S, C) as (C, taps, K) in either pass: boxes of
        # one tap, BK of the reduction's channels by BN output channels (the
        # forward: C by K), or 64 output channels by BK (backward-data: C by K, MN-major)
        w_dims = (int(w.shape[3]), taps, int(w.shape[0]))
        w_strides = (w_dims[0] * item, taps * w_dims[0] * item)
        map_a = _im2col_map(x, f, bk, bm)
        map_b = AddressArg(w, lambda ptr: encoded_tiled(
            ptr, dtype, w_dims, w_strides, (64, 1, bk) if data else (bk, 1, bn)))
        pitches = f["out_pitches"] or (0, 0, 0)  # (0, 0, 0: out's rows dense, k apart)
        geo = _im2col_geometry(f, cblocks, taps - 1 if data else 0, -1 if data else 1,
                               pitches)
        m, kk = f["m"], taps * cblocks * bk
        # a stride phase's rows of dx (out_pitches): the split-K reduction places them too
        rows = (OutMap(f["oh"] * f["ow"], pitches[0], pitches[2], 1, f["ow"], pitches[1])
                if f["out_pitches"] else None)
        splits, ws, c_vec, reduce = split_parts(dtype, out, m, k, math.gcd(k, *pitches),
                                                taps * cblocks, splits, rows)
        fn = jit.get_function(gemm_tma_module(dtype, tile, TMA_A_IM2COL), "gemm_tma", dtype,
                              (0 if data else 1,))
        args = (map_a, map_b, out, np.int32(m), np.int32(k), np.int32(kk), np.int64(k),
                np.int32(c_vec), np.int32(splits), ws, geo)
        launch = persistent_launch(fn, tile, item, output_tiles(m, k, tile) * splits, device,
                                   args, reduce)
        return launch, out
