"""Host side of the Hopper GEMM fed by TMA (``kernel_src/gemm/gemm_tma.cu``): tensor maps encoded
by the CUDA driver, operand checks, and a launcher for 2-D CuPy arrays.

``cupyconv.gemm`` runs 2-D float16 / bfloat16 products on it where :func:`gemm_tile` says so
(Hopper, TMA-readable operands, at least half a wave of tiles), and so do channels-last
convolutions (``_gemm/tma_conv.py``: 1x1 ones as dense GEMMs, other forwards through the
im2col maps of :func:`encoded_im2col`); ``CUPYCONV_TMA=0`` turns them off.  :func:`gemm_tma` is
the launcher the GPU tests and ``benchmarks/experiments/exp_gemm_tma.py`` call.

A call that runs it records for replay like any other (``cupyconv._core.program``): the maps
are ``AddressArg`` arguments, re-encoded where a replay's operands sit elsewhere, and encodings
are cached by address and layout.

TMA reads a 2-D tile ("box") of a matrix described by a 128-byte tensor map that the driver
encodes (``cuTensorMapEncodeTiled``); the kernel takes the map by value as a
``const __grid_constant__`` parameter.  The driver is reached through NVIDIA's ``cuda-bindings``
(the ``cuda13`` / ``cuda12`` extras), imported on first use only.

How the map travels through CuPy: CuPy's kernel launch (``cupy/cuda/function.pyx``,
``_pointer``) passes a ``numpy.ndarray`` *of size one* by value -- it hands the driver a pointer
to the array's data (``CNumpyArray``), and ``cuLaunchKernel`` copies as many bytes as the
kernel's parameter declares (128 for ``cc::TensorMap``) into the parameter buffer, at the
parameter's own 64-byte aligned offset, which the compiler laid out.  So a one-element array of a
128-byte structured dtype carries the map with no CuPy-side size limit (NumPy scalars stop at 16
bytes there).  Its host buffer is 64-byte aligned as well, matching the driver's CUtensorMap
alignment, though the driver's copy does not require it.
"""

from __future__ import annotations

import math
import os

import numpy as np

from cupyconv._core.caches import memoized
from cupyconv._core.dtypes import dtype_name
from cupyconv._core.program import AddressArg

__all__ = ["encode_tiled", "map_encoder", "gemm_tma", "gemm_tile", "runs_on_tma", "prepare_gemm_tma", "check_operands",
           "smem_bytes", "TENSOR_MAP_DTYPE"]

# The driver's CUtensorMap: 16 opaque 64-bit words (cuda.h: alignas(64) cuuint64_t opaque[16]).
TENSOR_MAP_DTYPE = np.dtype([("opaque", "<u8", (16,))])
TENSOR_MAP_BYTES = 128
_ALIGN = 64
SWIZZLE_BYTES = 128  # the widest TMA swizzle: a box row of at most 128 bytes
BOX_MAX = 256        # TMA's largest box extent per dimension
THREADS = 384        # one producer and two consumer warpgroups (gemm_tma.cu)
EPILOGUE_COLS = 128  # columns per round of a consumer warp's staged epilogue (EPI_COLS)
# A dense row pitch / base address that TMA accepts: multiples of 16 bytes.
TMA_ALIGN = 16
# The kernel's Im2colGeometry (gemm_tma.cu), passed by value like the maps: the output plane,
# stride, padding and dilation (rows, columns), the filter's width, channel blocks per tap, the
# weight tap of window tap t as wtap0 + wtap_step t; and where the output rows go in a strided
# view (element pitches of image, row and column; out_col 0: dense rows ldc apart).
IM2COL_GEOMETRY = np.dtype([(f, "<i4") for f in ("oh", "ow", "sh", "sw", "ph", "pw", "dh", "dw",
                                                  "kw", "cblocks", "wtap0", "wtap_step",
                                                  "out_image", "out_row", "out_col")],
                           align=True)
# im2col maps of 4-D tensors: the pixel box's corners are signed 8-bit (the filter offsets,
# 0..255, stay within reach of them)
IM2COL_CORNER = (-128, 127)
TMA_DTYPES = ("float16", "bfloat16")
# What the kernel reads (tensor maps, operand checks): the routed 16-bit types, and float32 for
# TF32 products (both operands K-major: tma_conv and cupyconv.gemm route to it at precision
# "tf32").
TF32 = "float32"
KERNEL_DTYPES = TMA_DTYPES + (TF32,)
_DRIVER_HINT = ("the TMA GEMM encodes its tensor maps with NVIDIA's cuda-bindings: "
                "pip install 'cupyconv[cuda13]' (or 'cupyconv[cuda12]' for CUDA 12 drivers), "
                "or pip install 'cuda-bindings==13.*'")


def _driver():
    """``cuda.bindings.driver``, imported on first use."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise ImportError(_DRIVER_HINT) from exc
    return driver


def _tma_dims(name: str, shape, strides, itemsize: int) -> tuple[tuple[int, int], int]:
    """((inner extent, outer extent), outer pitch in bytes) of a 2-D view whose last dim is
    contiguous, as TMA takes it; ValueError (naming ``name``) where TMA cannot read it.  An outer
    extent of 1 has no meaningful pitch: the dense one, rounded up to 16 bytes, is used."""
    rows, cols = (int(s) for s in shape)
    rstride, cstride = (int(s) for s in strides)
    if rows == 0 or cols == 0:
        raise ValueError(f"{name} is empty: TMA needs non-empty dims")
    if cols > 1 and cstride != itemsize:
        raise ValueError(f"{name} must be contiguous along its last dim for TMA (element stride "
                         f"{cstride // itemsize}, need 1): pass cupy.ascontiguousarray({name})")
    pitch = rstride if rows > 1 else -(-cols * itemsize // TMA_ALIGN) * TMA_ALIGN
    if pitch <= 0 or pitch % TMA_ALIGN:
        raise ValueError(f"{name}'s rows must start 16 bytes apart for TMA (a multiple of 16 bytes:"
                         f" {16 // itemsize} elements), got a row pitch of {rstride} bytes; pad "
                         f"the contiguous dim to a multiple of {16 // itemsize} elements")
    if pitch < cols * itemsize:
        raise ValueError(f"{name}'s rows overlap (row pitch {pitch} bytes < {cols * itemsize})")
    if max(rows, cols) > 2**32 or pitch >= 2**40:
        raise ValueError(f"{name} is too large for a TMA tensor map (dims up to 2^32, pitch "
                         f"below 2^40 bytes)")
    return (cols, rows), pitch


def encode_tiled(array2d, box_rows: int, box_cols: int, swizzle128: bool = True) -> np.ndarray:
    """The tensor map of a 2-D CuPy array (float16 or bfloat16, last dim contiguous, rows 16-byte
    aligned) for boxes of ``box_rows`` x ``box_cols`` elements, ``box_cols`` along the contiguous
    dim; with ``swizzle128`` the box lands in shared memory in the 128-byte swizzle (rows of at
    most 128 bytes).  Elements outside the array read as zeros.

    Returns a one-element NumPy array of :data:`TENSOR_MAP_DTYPE` (128 bytes, 64-byte aligned),
    which a CuPy kernel launch passes by value (see the module docstring).  The map holds the
    array's address: keep the array alive while kernels use the map.  Maps are cached by
    address and layout (:func:`map_encoder`); the returned array must not be written."""
    return map_encoder(array2d, box_rows, box_cols, swizzle128)(int(array2d.data.ptr))


def map_encoder(array2d, box_rows: int, box_cols: int, swizzle128: bool = True):
    """``encode(ptr)``: the tensor map (as :func:`encode_tiled` returns it) of an array laid out
    as ``array2d`` (dtype, shape, strides) at address ``ptr``, for the given boxes.  Checks the
    layout now, naming the problem; a recorded call's replay calls it with its own operands'
    addresses (``program.AddressArg``)."""
    dtype = dtype_name(array2d.dtype)
    if dtype not in KERNEL_DTYPES:
        raise TypeError(f"encode_tiled: dtype {dtype} not supported (float16, bfloat16, "
                        f"float32 for TF32)")
    if array2d.ndim != 2:
        raise ValueError(f"encode_tiled: a 2-D array is needed, got {array2d.ndim}-D")
    itemsize = array2d.dtype.itemsize
    dims, pitch = _tma_dims("array2d", array2d.shape, array2d.strides, itemsize)
    if int(array2d.data.ptr) % TMA_ALIGN:
        raise ValueError("encode_tiled: the array must start 16-byte aligned for TMA")
    if not (0 < box_rows <= BOX_MAX and 0 < box_cols <= BOX_MAX):
        raise ValueError(f"encode_tiled: box extents must be 1..{BOX_MAX}, got "
                         f"{box_rows} x {box_cols}")
    if (box_cols * itemsize) % TMA_ALIGN or (swizzle128 and box_cols * itemsize > SWIZZLE_BYTES):
        raise ValueError(f"encode_tiled: a box row of {box_cols * itemsize} bytes; need a "
                         f"multiple of 16 bytes{', at most 128 with the 128-byte swizzle' if swizzle128 else ''}")
    return lambda ptr: encoded_tiled(ptr, dtype, dims, (pitch,), (box_cols, box_rows),
                                     swizzle128)


def _data_kind(drv, dtype: str):
    # float32 as TFLOAT32: the copy engine rounds the operands to TF32 on the way (to nearest,
    # ties to even: experiments/exp_tma_tf32.py), so the kernel needs no rounding pass
    kinds = drv.CUtensorMapDataType
    return {"float16": kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            "bfloat16": kinds.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            TF32: kinds.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32}[dtype]


def _encode(drv, encode: str, args: tuple, swizzle128: bool, what: str) -> np.ndarray:
    """``drv.<encode>(*args, ...)`` with the options every map here shares (no interleave, the
    128-byte swizzle or none, 256-byte L2 promotion, zeros for elements outside the tensor:
    NAN_REQUEST_ZERO_FMA would give NaNs), as a by-value record; ``what`` describes the map in
    the error."""
    swizzle = (drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle128
               else drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE)
    err, tmap = getattr(drv, encode)(
        *args, drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{encode} failed: {err!r} ({what})")
    return _map_record([int(w) for w in tmap.opaque])


@memoized(1024)
def encoded_tiled(ptr: int, dtype: str, dims: tuple, strides: tuple, box: tuple,
                  swizzle128: bool = True) -> np.ndarray:
    """The driver's tiled tensor map of a tensor at ``ptr`` with ``dims`` (innermost first, the
    first contiguous), byte ``strides`` of the outer dims (multiples of 16) and ``box`` (its
    first extent at most 128 bytes with the 128-byte swizzle): the 2-D operands of
    :func:`map_encoder`, the convolution's weights as [K][taps][C].  Checked by the caller.
    Cached: encoding through cuda-bindings costs tens of microseconds, and a training loop's
    arrays come back at the same pool addresses."""
    if ptr % TMA_ALIGN:  # (a replay's operand at another alignment: the call key prevents it)
        raise ValueError("a TMA operand must start 16-byte aligned")
    drv = _driver()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    return _encode(drv, "cuTensorMapEncodeTiled",
                   (_data_kind(drv, dtype), len(dims), ptr, [u64(d) for d in dims],
                    [u64(s) for s in strides], [u32(b) for b in box], [u32(1)] * len(dims)),
                   swizzle128, f"dims {dims}, strides {strides} bytes, box {box}")


@memoized(1024)
def encoded_im2col(ptr: int, dtype: str, dims: tuple, strides: tuple, lower: tuple,
                   upper: tuple, channels: int, pixels: int, element_strides: tuple) -> np.ndarray:
    """The driver's im2col tensor map of a channels-last activation at ``ptr``: ``dims`` (C, W,
    H, N), byte ``strides`` of W, H and N, the pixel window's ``lower`` and ``upper`` corners
    (W, H) relative to the tensor's first and last pixel at filter offset 0, ``channels`` per
    pixel and ``pixels`` per box, the traversal's ``element_strides`` (1, stride W, stride H, 1).
    128-byte swizzle; pixels outside the tensor read as zeros.  Checked by the caller
    (``_gemm/tma_conv.py``)."""
    if ptr % TMA_ALIGN:
        raise ValueError("a TMA operand must start 16-byte aligned")
    drv = _driver()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    return _encode(drv, "cuTensorMapEncodeIm2col",
                   (_data_kind(drv, dtype), 4, ptr, [u64(d) for d in dims],
                    [u64(s) for s in strides], list(lower), list(upper), channels, pixels,
                    [u32(e) for e in element_strides]),
                   True, f"dims {dims}, strides {strides} bytes, corners {lower} / {upper}, "
                   f"{channels} channels x {pixels} pixels, element strides {element_strides}")


def im2col_geometry(**fields) -> np.ndarray:
    """A one-element IM2COL_GEOMETRY record (fields not given are 0), passed by value."""
    rec = np.zeros(1, dtype=IM2COL_GEOMETRY)
    for name, value in fields.items():
        rec[name] = value
    return rec


_NO_IM2COL = im2col_geometry()  # (the GEMM modes')


def _map_record(words) -> np.ndarray:
    """A one-element TENSOR_MAP_DTYPE array holding ``words`` (16 uint64), in a 64-byte aligned
    host buffer (the view keeps its buffer alive)."""
    buf = np.zeros(TENSOR_MAP_BYTES + _ALIGN, dtype=np.uint8)
    off = -buf.ctypes.data % _ALIGN
    rec = buf[off:off + TENSOR_MAP_BYTES].view(TENSOR_MAP_DTYPE)
    rec["opaque"][0] = np.asarray(words, dtype=np.uint64)
    return rec


def smem_bytes(tile: tuple[int, ...], itemsize: int = 2) -> int:
    """Dynamic shared memory of ``gemm_tma`` with ``tile`` = (BM, BN, BK, STAGES), as the kernel
    lays it out: STAGES stages of A and B from a 1024-byte aligned base (1024 bytes of slack for
    the alignment), the epilogue's staging rows (16 x ``EPILOGUE_COLS`` per consumer warp, BM / 16
    warps; none for TF32's float32 result, stored from the fragments), then a full and an empty
    barrier (8 bytes each) per stage."""
    bm, bn, bk, stages = tile
    staging = EPILOGUE_COLS if itemsize == 2 else 0
    return (stages * (bm + bn) * bk + bm * staging) * itemsize + 1024 + 2 * stages * 8


def output_tiles(m: int, n: int, tile) -> int:
    """Output tiles of ``tile`` (BM, BN, ...) over an m x n product."""
    return math.ceil(m / tile[0]) * math.ceil(n / tile[1])


def store_width(ldc: int, out) -> int:
    """The kernel's ``c_vec`` for rows ``ldc`` elements apart from ``out``'s address: the widest
    store (8, 2 or 1 elements) that every row start takes aligned.  (A call's key holds its
    arrays' addresses modulo 16, so a replay keeps it true.)"""
    item = out.dtype.itemsize
    return max(v for v in (8, 2, 1) if ldc % v == 0 and int(out.data.ptr) % (v * item) == 0)


def persistent_launch(fn, tile, itemsize: int, units: int, device: int, args, after=None):
    """``launch()`` of the compiled ``gemm_tma`` ``fn`` over ``units`` work units: one block per
    multiprocessor (fewer for fewer units) of THREADS threads with the tile's shared memory
    (raised on ``fn`` where it needs more than the default), on ``device``; ``after()`` (a
    split-K reduction), when given, follows it.  ``args`` hold the operands (their maps are
    ``AddressArg`` objects holding the arrays), which so stay alive with the launch."""
    import cupy

    from cupyconv._core.launch import sm_count

    smem = smem_bytes(tile, itemsize)
    if fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = smem
    grid = (min(sm_count(device), units),)

    def launch():
        with cupy.cuda.Device(device):
            fn(grid, (THREADS,), args, shared_mem=smem)
            if after is not None:
                after()

    return launch


def check_pair(arrays: dict, ndim: int, shape_words: str, tf32: bool = False) -> str:
    """The dtype of the kernel's two operands (``arrays``: name -> array, the first sets the
    dtype): each ``ndim``-D (``shape_words`` names that in the error), both float16 or both
    bfloat16 (or, with ``tf32``, both float32: TF32 products); raises ValueError / TypeError
    naming the argument."""
    for name, x in arrays.items():
        if x.ndim != ndim:
            raise ValueError(f"{name} must be {shape_words}, got shape {tuple(x.shape)}")
    (first, a), (second, b) = arrays.items()
    dtype = dtype_name(a.dtype)
    if dtype not in (KERNEL_DTYPES if tf32 else TMA_DTYPES):
        raise TypeError(f"{first} has dtype {dtype}; the TMA kernel takes float16 or bfloat16"
                        + (" (or float32: TF32 products)" if tf32 else ""))
    if dtype_name(b.dtype) != dtype:
        raise TypeError(f"{second} has dtype {dtype_name(b.dtype)}, {first} has {dtype}: they "
                        f"must match")
    return dtype


def check_operands(a, b, out=None, tile=None) -> dict:
    """Check ``a`` (M, K), ``b`` (K, N) and ``out`` (M, N) for the TMA GEMM from their dtype,
    shape, strides and address (``.data.ptr``) alone, so the rules are testable without a GPU;
    raises TypeError / ValueError naming the argument.  Returns the launch facts: dtype, m, n, k,
    whether A is K-major (``a_kmajor``: rows contiguous; else a view of a [K, M] array, ``a.T``
    contiguous rows), whether B is K-major (``b_kmajor``: b is a view of an [N, K] array,
    ``b.T`` contiguous rows) and C's row pitch in elements (``ldc``, None where ``out`` is None:
    a fresh C-contiguous array)."""
    dtype = check_pair({"a": a, "b": b}, 2, "2-D", tf32=True)
    tiles = kernel_tiles(dtype)
    tile = tiles[0] if tile is None else tuple(tile)
    if tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {dtype}, got {tile}")
    (m, k), (kb, n) = a.shape, b.shape
    if k != kb:
        raise ValueError(f"a is {m} x {k} and b is {kb} x {n}: a's columns must equal b's rows")
    itemsize = a.dtype.itemsize
    # b: rows contiguous (row-major [K, N]: MN-major for wgmma) or columns contiguous (the
    # transpose of a row-major [N, K]: K-major).  A single column reads best K-major (one row).
    rs, cs = (int(s) for s in b.strides)
    b_kmajor = (n == 1 or cs != itemsize) and (k == 1 or rs == itemsize)
    # a: rows contiguous (K-major), or columns contiguous (the transpose of a row-major [K, M]).
    ars, acs = (int(s) for s in a.strides)
    a_kmajor = k == 1 or acs == itemsize or not (m == 1 or ars == itemsize)
    if dtype == TF32 and not (a_kmajor and b_kmajor):
        raise ValueError("TF32 on the TMA kernel reads both operands K-major: a row-major "
                         "[M, K] and b the transpose of a row-major [N, K] (b = bt.T)")
    if m and n and k:  # (an empty product launches nothing: no layout rules)
        if a_kmajor:
            _tma_dims("a", a.shape, a.strides, itemsize)
        else:
            _tma_dims("a.T", (k, m), (acs, ars), itemsize)
        if b_kmajor:
            _tma_dims("b.T", (n, k), (cs, rs), itemsize)
        elif cs != itemsize:
            raise ValueError("b must be contiguous along one of its dims for TMA (row-major "
                             "[K, N], or the transpose of a row-major [N, K]): pass "
                             "cupy.ascontiguousarray(b)")
        else:
            _tma_dims("b", b.shape, b.strides, itemsize)
        for name, x in (("a", a), ("b", b)):
            if int(x.data.ptr) % TMA_ALIGN:
                raise ValueError(f"{name} must start 16-byte aligned for TMA (a view at an offset "
                                 f"of {int(x.data.ptr) % TMA_ALIGN} bytes): pass a copy")
    ldc = None
    if out is not None:
        if out.ndim != 2 or tuple(out.shape) != (m, n):
            raise ValueError(f"out must have shape {(m, n)}, got {tuple(out.shape)}")
        if dtype_name(out.dtype) not in (dtype, "float32"):
            raise TypeError(f"out has dtype {dtype_name(out.dtype)}, need {dtype} (or float32: "
                            f"the unrounded sums)")
        out_item = out.dtype.itemsize
        rs, cs = out.strides
        if (dtype != TF32 and out_item == 4
                and ((n > 1 and cs != 4) or (m > 1 and rs != 4 * n))):
            raise ValueError("a float32 out must be C-contiguous (the sums go out as rows of n)")
        if (n > 1 and cs != out_item) or (m > 1 and (rs < n * out_item or rs % out_item)):
            raise ValueError("out must have contiguous, non-overlapping rows (element stride 1 "
                             "along its last dim)")
        ldc = rs // out_item if m > 1 else n
    tiles = output_tiles(m, n, tile)
    if tiles >= 2**31 or m >= 2**31 or n >= 2**31 or k >= 2**31:
        raise ValueError(f"problem too large for the TMA GEMM's 32-bit tile indices ({m} x {n} x {k})")
    return {"dtype": dtype, "m": m, "n": n, "k": k, "a_kmajor": a_kmajor, "b_kmajor": b_kmajor,
            "ldc": ldc, "tile": tile}


def kernel_tiles(dtype: str) -> tuple:
    """The tiles the kernel is built with for ``dtype`` (16-bit or TF32's float32)."""
    from cupyconv._core.kernels import TMA_TF32_TILES, TMA_TILES

    return TMA_TF32_TILES if dtype == TF32 else TMA_TILES


def _require_hopper(device_id: int) -> None:
    import cupy

    if cupy.cuda.runtime.is_hip:
        raise RuntimeError("the TMA GEMM runs on NVIDIA Hopper (compute capability 9.0) only")
    cc = cupy.cuda.Device(device_id).compute_capability
    if cc != "90":
        raise RuntimeError(f"the TMA GEMM needs compute capability 9.0 (sm_90a: TMA, wgmma, "
                           f"setmaxnreg); device {device_id} is {cc[:-1]}.{cc[-1]}")


def tma_enabled() -> bool:
    """Whether the TMA kernel may be routed to (``CUPYCONV_TMA``, default on; 0 turns it off)."""
    return os.environ.get("CUPYCONV_TMA", "1") != "0"


@memoized(None)
def runs_here(device_id: int) -> bool:
    """Whether ``device_id`` is a Hopper GPU and the driver binding is importable (False where
    CUDA sees no device: the cost models ask it of modelled devices on machines without one)."""
    import cupy

    if cupy.cuda.runtime.is_hip:
        return False
    try:
        if cupy.cuda.Device(device_id).compute_capability != "90":
            return False
    except cupy.cuda.runtime.CUDARuntimeError:
        return False
    try:
        _driver()
    except ImportError:
        return False
    return True


# cupyconv.gemm takes the 128 x 256 tile from this many rounds of such tiles over the
# multiprocessors on (see gemm_tile).
WIDE_TILE_ROUNDS = 2


def gemm_tile(a, b, c, *, wide: bool = False, precision: str = "exact"):
    """The tile ``c = a @ b`` runs with on the TMA kernel, or None where it keeps its other
    loops: where :func:`runs_on_tma` says no, or with fewer 128 x 128 tiles than half the
    multiprocessors (the persistent grid splits no K here: the other loop splits K for small
    outputs).

    128 x 128 x 64 with 6 stages; with ``wide`` (:func:`cupyconv.gemm`'s dense products) 128 x
    256 x 64 with 4 stages where its tiles fill at least WIDE_TILE_ROUNDS rounds of the
    multiprocessors.  With the shared-memory epilogue, on an H200 (benchmarks/notes/gemm.md,
    session 31) the wide tile ran 8192^3 in 1.40-1.47 ms against 1.48-1.62 ms for 128 x 128
    (fp16 and bf16, both B orientations) and 4096^3 within noise of it (0.212 against 0.216 ms
    on average); the convolutions keep 128 x 128, which beat 128 x 256 on 15 of 17 1x1 layers
    (session 29, before that epilogue).  float32 at ``precision`` "tf32": the same choice
    among ``kernels.TMA_TF32_TILES`` (the same tiles in bytes)."""
    from cupyconv._core.launch import sm_count

    wide_tile, tile = kernel_tiles(dtype_name(a.dtype))[:2]  # (the narrow one: convolutions)
    if not runs_on_tma(a, b, c, tile, precision):
        return None
    m, n = c.shape
    sms = sm_count(c.data.device_id)
    if output_tiles(m, n, tile) < sms // 2:
        return None
    if (wide and output_tiles(m, n, wide_tile) >= WIDE_TILE_ROUNDS * sms
            and runs_on_tma(a, b, c, wide_tile, precision)):
        return wide_tile
    return tile


def tf32_k_major(a, b, c):
    """``(a, b)`` for a float32 product ``c = a @ b`` at TF32 as the TMA kernel reads them, both
    K-major: a C-contiguous copy of ``a`` where its columns are contiguous, ``b`` as the
    transpose of a C-contiguous copy of ``b.T`` where its rows are (one pass over the operand:
    on an H200 about a tenth of a 4096^3 product).  The operands are returned unchanged where
    the product would not run on the TMA kernel anyway: not Hopper, ``CUPYCONV_TMA=0``, k not a
    multiple of 4 (16-byte rows), or fewer 128 x 128 tiles than half the multiprocessors (as
    :func:`gemm_tile`)."""
    from cupyconv._core.copy import contiguous
    from cupyconv._core.launch import sm_count

    (m, k), n = a.shape, b.shape[1]
    device = c.data.device_id
    if (dtype_name(a.dtype) != TF32 or dtype_name(b.dtype) != TF32 or k % 4 or m == 0
            or n == 0 or not tma_enabled() or not runs_here(device)
            or output_tiles(m, n, kernel_tiles(TF32)[1]) < sm_count(device) // 2):
        return a, b
    item = a.itemsize
    if not (k == 1 or a.strides[1] == item):
        a = contiguous(a)
    if not (k == 1 or b.strides[0] == item):
        b = contiguous(b.T).T
    return a, b


def takes_dtype(dtype: str, precision: str = "exact") -> bool:
    """Whether the TMA kernel runs products of ``dtype`` at ``precision``: float16 and bfloat16,
    and float32 at "tf32" (TF32 products, both operands K-major)."""
    return dtype in TMA_DTYPES or (dtype == TF32 and precision == "tf32")


def runs_on_tma(a, b, c, tile, precision: str = "exact") -> bool:
    """Whether ``c = a @ b`` can run on the TMA kernel with ``tile``: not ``CUPYCONV_TMA=0``, a
    2-D float16 / bfloat16 product (``c`` of that dtype or float32), or a float32 one at
    ``precision`` "tf32", on a Hopper GPU with cuda-bindings, operands TMA can read
    (:func:`check_operands`)."""
    if not tma_enabled():
        return False
    if a.ndim != 2 or b.ndim != 2 or not takes_dtype(dtype_name(a.dtype), precision):
        return False
    if not runs_here(c.data.device_id):
        return False
    try:
        check_operands(a, b, c, tile)
    except (TypeError, ValueError):
        return False
    return True


def prepare_gemm_tma(a, b, out=None, *, tile=None, splits: int = 1):
    """The launch of ``a @ b`` (see :func:`gemm_tma`) prepared once: operands checked, tensor
    maps encoded, kernel compiled.  Returns ``(launch, out)``: each ``launch()`` runs the kernel
    again on the same arrays (benchmarks time this without the host work).

    ``splits`` > 1 splits the k slices into that many parts (fewer where parts would be empty),
    summed in fp32 into a workspace and added in part order by a second kernel
    (``splitk_reduce.cu``): for long k over a small output (backward-weight).  A float32
    ``out`` (C-contiguous, ``splits`` 1) receives the fp32 sums unrounded."""
    import cupy

    from cupyconv._core import jit
    from cupyconv._core.arrays import require_array, same_device
    from cupyconv._core.kernels import gemm_tma_module

    if not isinstance(splits, int) or splits < 1:
        raise ValueError(f"splits must be a positive int, got {splits!r}")
    a = require_array(a, "a")
    b = require_array(b, "b")
    arrays = {"a": a, "b": b}
    if out is not None:
        out = require_array(out, "out")
        arrays["out"] = out
    facts = check_operands(a, b, out, tile)
    # (16-bit operands with a float32 out: the unrounded sums, C a null pointer; TF32's float32
    # out is its ordinary result)
    fp32_out = (out is not None and dtype_name(out.dtype) == "float32"
                and facts["dtype"] != TF32)
    if fp32_out and splits != 1:
        raise ValueError(f"a float32 out takes splits=1, got {splits}")
    same_device(arrays)
    device = a.device.id
    m, n, k, tile = facts["m"], facts["n"], facts["k"], facts["tile"]
    with cupy.cuda.Device(device):
        _require_hopper(device)
        _driver()  # (the ImportError with its hint before any compile)
        if out is None:
            out = cupy.empty((m, n), dtype=a.dtype)
        if m == 0 or n == 0:
            return (lambda: None), out
        if k == 0:
            def zeros():
                out[...] = 0
            return zeros, out
        bm, bn, bk, _ = tile
        # (as AddressArgs: a recorded call re-encodes them for its replay's operands)
        if facts["a_kmajor"]:
            map_a = AddressArg(a, map_encoder(a, bm, bk))
        else:  # BM / 64 boxes of 64 m per stage, one per consumer warpgroup
            map_a = AddressArg(a, map_encoder(a.T, bk, 64))
        if facts["b_kmajor"]:
            map_b = AddressArg(b, map_encoder(b.T, bn, bk))  # (b.T: a view at b's address)
        else:
            map_b = AddressArg(b, map_encoder(b, bk, 64))  # BN / 64 boxes of 64 n per stage
        ldc = facts["ldc"] if facts["ldc"] is not None else n
        splits, ws, c_vec, reduce = split_parts(facts["dtype"], out, m, n, ldc,
                                                math.ceil(k / bk), splits)
        c = out
        if fp32_out:  # no C (a null pointer): the one part's fp32 rows are the result
            ws, c = out, np.uint64(0)
            c_vec = 2 if n % 2 == 0 and int(out.data.ptr) % 8 == 0 else 1
        fn = jit.get_function(gemm_tma_module(facts["dtype"], tile, int(facts["a_kmajor"])),
                              "gemm_tma", facts["dtype"], (int(facts["b_kmajor"]),))
        args = (map_a, map_b, c, np.int32(m), np.int32(n), np.int32(k), np.int64(ldc),
                np.int32(c_vec), np.int32(splits), ws, _NO_IM2COL)
        launch = persistent_launch(fn, tile, a.dtype.itemsize, output_tiles(m, n, tile) * splits,
                                   device, args, reduce)
        return launch, out


def split_parts(dtype: str, out, m: int, n: int, ldc: int, slices: int, splits: int,
                rows=None):
    """``(splits, ws, c_vec, reduce)`` of a gemm_tma launch whose m x n result goes to ``out``
    (rows ``ldc`` elements apart, or placed by the ``OutMap`` ``rows`` where given; ``ldc`` is
    then the largest store width the placement allows) over ``slices`` k slices in ``splits``
    parts, fewer where a part would be empty.  Split, the kernel writes fp32 rows of n to the
    scratch workspace ``ws`` (``c_vec`` 2 where n is even) and ``reduce()`` adds them in part order into out (bitwise
    repeatable); unsplit, ``ws`` is out (not touched), ``c_vec`` out's store width and
    ``reduce`` None."""
    from cupyconv._core.program import scratch
    from cupyconv._gemm.kernel_args import OutMap
    from cupyconv._gemm.launch import reduce_splits

    splits = math.ceil(slices / math.ceil(slices / min(splits, slices)))  # (none empty)
    if splits == 1:
        return 1, out, store_width(ldc, out), None
    ws = scratch(splits * m * n, "float32")
    rows = rows or OutMap(m, 0, ldc, 1)

    def reduce():
        reduce_splits(dtype, ws, out, None, splits, 1, m, n, 1, 0, 0, 0, rows, True)

    return splits, ws, 2 if n % 2 == 0 else 1, reduce


def gemm_tma(a, b, out=None, *, tile=None, splits: int = 1):
    """``a @ b`` for 2-D float16 / bfloat16 CuPy arrays on a Hopper GPU, with the TMA-fed,
    warp-specialized kernel (fp32 accumulation, result in the input dtype); or for float32
    arrays with TF32 products (a row-major, b = bt.T: both K-major; tiles
    ``kernels.TMA_TF32_TILES``).

    ``a``: (M, K), either row-major (K contiguous) or the transpose of a row-major (K, M) array
    (``at.T``), its contiguous rows 16-byte aligned (a multiple of 8 elements for dense rows).
    ``b``: (K, N), either row-major (N contiguous) or the transpose of a row-major (N, K) array
    (``bt.T``), likewise.  ``out``: optional (M, N) array with contiguous rows.  ``tile``: one
    of ``kernels.TMA_TILES`` (default the first, 128 x 256).  ``splits``: split-K parts (see
    :func:`prepare_gemm_tma`).  Every check runs before anything is compiled or launched."""
    launch, out = prepare_gemm_tma(a, b, out, tile=tile, splits=splits)
    launch()
    return out
