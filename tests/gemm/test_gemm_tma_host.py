"""The Hopper TMA GEMM without a GPU: its kernel module compiles with NVRTC for sm_90a (and to a
trapping stub for sm_80), is registered for NVIDIA only, and the launcher's operand rules reject
bad dtypes, shapes and strides before anything is compiled or launched."""

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.kernels import (REGISTRY, TMA_B_IM2COL, TMA_DTYPES, TMA_TF32_TILES, TMA_TILES,
                                    gemm_tma_module)
from cupyconv._gemm import tma


def _fake(shape, dtype="float16", strides=None, ptr=0x10000):
    """What check_operands reads of an array: ndim, shape, dtype, strides, data.ptr."""
    dt = numpy_dtype(dtype)
    if strides is None:
        strides = (shape[1] * dt.itemsize, dt.itemsize)
    return SimpleNamespace(ndim=len(shape), shape=tuple(shape), dtype=dt, strides=tuple(strides),
                           data=SimpleNamespace(ptr=ptr))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", TMA_DTYPES)
@pytest.mark.parametrize("tile", TMA_TILES)
@pytest.mark.parametrize("a_mode", [0, 1, 2, 3])
def test_the_tma_kernel_compiles_with_nvrtc(arch, dtype, tile, a_mode):
    from cupyconv._cli import compile_check

    res = compile_check.check_module(gemm_tma_module(dtype, tile, a_mode), "nvidia", arch)
    if res.status == "skipped":
        pytest.skip(res.log)
    assert res.status == "ok", res.log


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("tile", TMA_TF32_TILES)
@pytest.mark.parametrize("a_mode", [1, 2])
def test_the_tma_kernel_compiles_with_nvrtc_for_tf32(arch, tile, a_mode):
    from cupyconv._cli import compile_check

    res = compile_check.check_module(gemm_tma_module("float32", tile, a_mode), "nvidia", arch)
    if res.status == "skipped":
        pytest.skip(res.log)
    assert res.status == "ok", res.log


def test_the_tma_modules_are_registered_for_nvidia_only():
    mods = [m for m in REGISTRY if m.source == "gemm/gemm_tma.cu"]
    half = [m for m in mods if m.dtypes != ("float32",)]
    assert len(half) == len(TMA_DTYPES) * len(TMA_TILES) * 4  # (the four operand modes)
    assert all(m.vendors == ("nvidia",) for m in mods)
    # both orientations of B in each binary (the im2col mode: forward and backward-data), but
    # backward-weight's im2col B, MN-major only
    assert all(m.variants == (((0,),) if m.tile[-1] == TMA_B_IM2COL else ((0,), (1,)))
               for m in half)
    # TF32: A K-major (dense or im2col), B K-major only
    tf32 = [m for m in mods if m.dtypes == ("float32",)]
    assert sorted((m.tile[:4], m.tile[-1]) for m in tf32) == sorted(
        (tile, mode) for tile in TMA_TF32_TILES for mode in (1, 2))
    assert all(m.variants == ((1,),) for m in tf32)


@pytest.mark.parametrize("tile,itemsize", [(t, 2) for t in TMA_TILES]
                         + [(t, 4) for t in TMA_TF32_TILES])
def test_the_stages_fit_a_hopper_block(tile, itemsize):
    assert tma.smem_bytes(tile, itemsize) <= 227 * 1024
    bm, bn, bk, _ = tile
    assert bk * itemsize == tma.SWIZZLE_BYTES and bm <= tma.BOX_MAX and bn <= tma.BOX_MAX


def test_tf32_takes_k_major_float32_operands_and_its_own_tiles():
    """float32 operands are TF32 products: a row-major, b = bt.T; the float32 out is the
    result (not the 16-bit kernels' unrounded sums), with a row pitch if need be."""
    b = SimpleNamespace(ndim=2, shape=(64, 16), dtype=numpy_dtype("float32"), strides=(4, 256),
                        data=SimpleNamespace(ptr=0x10000))  # (bt (16, 64) row-major, as bt.T)
    facts = tma.check_operands(_fake((8, 64), "float32"), b,
                               _fake((8, 16), "float32", strides=(128, 4)))
    assert facts["a_kmajor"] and facts["b_kmajor"] and facts["ldc"] == 32
    assert facts["tile"] == TMA_TF32_TILES[0] and facts["dtype"] == "float32"
    with pytest.raises(ValueError, match="K-major"):  # b row-major [K, N]: MN-major
        tma.check_operands(_fake((8, 64), "float32"), _fake((64, 16), "float32"))
    with pytest.raises(ValueError, match="tile"):  # a 16-bit tile (BK 64 of 2 bytes)
        tma.check_operands(_fake((8, 64), "float32"), b, tile=TMA_TILES[1])


def test_the_host_sizes_the_epilogue_buffers_as_the_kernel_lays_them_out():
    import re
    from pathlib import Path

    src = (Path(tma.__file__).parents[1] / "kernel_src" / "gemm" / "gemm_tma.cu").read_text()
    assert int(re.search(r"constexpr int EPI_COLS = (\d+);", src).group(1)) == tma.EPILOGUE_COLS
    bm, bn, bk, stages = TMA_TILES[1]
    assert tma.smem_bytes(TMA_TILES[1]) - tma.smem_bytes(TMA_TILES[1][:3] + (stages - 1,)) == (
        (bm + bn) * bk * 2 + 16)  # a stage more: its A and B boxes and its two barriers
    # every tile's epilogue rounds are whole: BN a multiple of EPI_COLS, or one round of BN
    # columns (the 64-column tile) in the EPI_COLS-wide buffer
    assert all(tile[1] % tma.EPILOGUE_COLS == 0 or tma.EPILOGUE_COLS % tile[1] == 0
               for tile in TMA_TILES)
    # and every tile's shared memory fits the 227 KB a block may take on Hopper
    assert all(tma.smem_bytes(t) <= 227 * 1024 for t in TMA_TILES)
    assert all(tma.smem_bytes(t, 4) <= 227 * 1024 for t in TMA_TF32_TILES)


@pytest.mark.parametrize("dtype", TMA_DTYPES)
def test_both_orientations_of_a_are_recognised(dtype):
    b = _fake((64, 40), dtype)
    assert tma.check_operands(_fake((100, 64), dtype), b)["a_kmajor"]
    # the transpose of a row-major (K, M) array (backward-weight's dy^T): M contiguous
    facts = tma.check_operands(_fake((100, 64), dtype, strides=(2, 208)), b)
    assert not facts["a_kmajor"] and (facts["m"], facts["k"]) == (100, 64)
    # its rows (k) must start 16 bytes apart as well: 100 elements of 2 bytes do not
    with pytest.raises(ValueError, match="a.T's rows must start 16 bytes apart"):
        tma.check_operands(_fake((100, 64), dtype, strides=(2, 200)), b)
    # contiguous along neither dim
    with pytest.raises(ValueError, match="a must be contiguous along its last dim"):
        tma.check_operands(_fake((100, 64), dtype, strides=(256, 4)), b)


@pytest.mark.parametrize("dtype", TMA_DTYPES)
def test_both_orientations_of_b_are_recognised(dtype):
    a = _fake((100, 64), dtype)
    row_major = tma.check_operands(a, _fake((64, 40), dtype))
    assert not row_major["b_kmajor"] and (row_major["m"], row_major["n"], row_major["k"]) == (100, 40, 64)
    # the transpose of a row-major (N, K) array: K contiguous
    transposed = tma.check_operands(a, _fake((64, 40), dtype, strides=(2, 128)))
    assert transposed["b_kmajor"]
    # one column reads K-major (its single row needs no 16-byte pitch)
    assert tma.check_operands(a, _fake((64, 1), dtype))["b_kmajor"]


@pytest.mark.parametrize("a, b, out, error, words", [
    (_fake((8, 64), "float64"), _fake((64, 8), "float64"), None, TypeError, "float16 or bfloat16"),
    (_fake((8, 64), "float16"), _fake((64, 8), "bfloat16"), None, TypeError, "must match"),
    (_fake((8, 64)), _fake((63, 8)), None, ValueError, "columns must equal"),
    (_fake((2, 8, 64)), _fake((64, 8)), None, ValueError, "2-D"),
    (_fake((8, 63)), _fake((63, 8)), None, ValueError, "16 bytes apart"),          # K % 8
    (_fake((8, 64)), _fake((64, 12)), None, ValueError, "16 bytes apart"),         # row-major N % 8
    (_fake((8, 64)), _fake((64, 8), strides=(4, 256)), None, ValueError, "contiguous"),
    (_fake((8, 64), strides=(128, 4)), _fake((64, 8)), None, ValueError, "contiguous"),
    (_fake((8, 64), ptr=0x10008), _fake((64, 8)), None, ValueError, "16-byte aligned"),
    (_fake((8, 64)), _fake((64, 8)), _fake((8, 9)), ValueError, "shape"),
    (_fake((8, 64)), _fake((64, 8)), _fake((8, 8), "bfloat16"), TypeError, "out has dtype"),
    (_fake((8, 64)), _fake((64, 8)), _fake((8, 8), strides=(32, 4)), ValueError, "contiguous"),
])
def test_bad_operands_are_refused(a, b, out, error, words):
    with pytest.raises(error, match=words):
        tma.check_operands(a, b, out)


def test_a_float32_out_takes_the_unrounded_sums_in_dense_rows():
    facts = tma.check_operands(_fake((8, 64)), _fake((64, 8)), _fake((8, 8), "float32"))
    assert facts["ldc"] == 8
    with pytest.raises(ValueError, match="float32 out must be C-contiguous"):
        tma.check_operands(_fake((8, 64)), _fake((64, 8)), _fake((8, 8), "float32",
                                                                 strides=(64, 4)))
    with pytest.raises(TypeError, match="out has dtype"):
        tma.check_operands(_fake((8, 64)), _fake((64, 8)), _fake((8, 8), "float64"))


def test_out_with_a_row_pitch_gives_ldc():
    facts = tma.check_operands(_fake((8, 64)), _fake((64, 8)), _fake((8, 8), strides=(48, 2)))
    assert facts["ldc"] == 24


def test_an_unknown_tile_is_refused():
    with pytest.raises(ValueError, match="tile"):
        tma.check_operands(_fake((8, 64)), _fake((64, 8)), tile=(64, 64, 64, 2))


def test_host_arrays_are_refused_before_compiling(monkeypatch):
    from cupyconv._core import jit

    monkeypatch.setattr(jit, "get_function", lambda *a, **k: pytest.fail("compiled"))
    a = np.zeros((8, 64), np.float16)
    with pytest.raises(TypeError, match="cupy"):
        tma.gemm_tma(a, a.T.copy())


def test_encode_checks_its_box_before_the_driver(monkeypatch):
    monkeypatch.setattr(tma, "_driver", lambda: pytest.fail("reached the driver"))
    arr = _fake((64, 64))
    with pytest.raises(ValueError, match="at most 128"):
        tma.encode_tiled(arr, 64, 128)       # 256-byte box rows: wider than the swizzle
    with pytest.raises(ValueError, match="1..256"):
        tma.encode_tiled(arr, 512, 64)
    with pytest.raises(TypeError, match="float16"):
        tma.encode_tiled(_fake((64, 64), "float64"), 64, 16)


def test_missing_cuda_bindings_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(ImportError, match="cuda13"):
        tma._driver()


def test_the_tensor_map_record_is_128_aligned_bytes():
    rec = tma._map_record(range(16))
    assert rec.shape == (1,) and rec.nbytes == 128 and rec.ctypes.data % 64 == 0
    assert rec.view(np.uint64).tolist() == list(range(16))


class _FakeDriver:
    """What the encoders read of cuda.bindings.driver, recording each encode call's arguments."""

    class _Enum:
        def __getattr__(self, name):
            return name

    cuuint64_t = cuuint32_t = int
    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = _Enum()
    CUtensorMapL2promotion = CUtensorMapFloatOOBfill = CUresult = _Enum()

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):  # cuTensorMapEncode*
        def encode(*args):
            self.calls.append((name, args))
            return "CUDA_SUCCESS", SimpleNamespace(opaque=list(range(16)))
        return encode


def test_the_encoders_hand_the_driver_what_its_signatures_take(monkeypatch):
    from cupyconv._core.caches import clear_caches

    drv = _FakeDriver()
    monkeypatch.setattr(tma, "_driver", lambda: drv)
    clear_caches()  # (the encodings are cached by address and layout)
    a = _fake((100, 64), "bfloat16", ptr=0x20000)  # rows of 128 bytes
    rec = tma.map_encoder(a, 128, 64)(0x20000)
    assert rec.view(np.uint64).tolist() == list(range(16))
    shared = ("CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_128B",
              "CU_TENSOR_MAP_L2_PROMOTION_L2_256B", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
    assert drv.calls[-1] == ("cuTensorMapEncodeTiled", (
        "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2, 0x20000, [64, 100], [128], [64, 128], [1, 1])
        + shared)
    tma.encoded_tiled(0x30000, "float16", (72, 9, 40), (144, 1296), (64, 1, 128))
    assert drv.calls[-1] == ("cuTensorMapEncodeTiled", (
        "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 3, 0x30000, [72, 9, 40], [144, 1296], [64, 1, 128],
        [1, 1, 1]) + shared)
    tma.encoded_im2col(0x40000, "float16", (64, 15, 14, 2), (128, 1920, 26880), (-1, -1),
                       (-2, -2), 64, 128, (1, 2, 2, 1))
    assert drv.calls[-1] == ("cuTensorMapEncodeIm2col", (
        "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 4, 0x40000, [64, 15, 14, 2], [128, 1920, 26880],
        [-1, -1], [-2, -2], 64, 128, [1, 2, 2, 1]) + shared)
    assert len(drv.calls) == 3
    tma.map_encoder(a, 128, 64)(0x20000)  # (cached: no second call)
    assert len(drv.calls) == 3
    clear_caches()


@pytest.mark.parametrize("m,n,k,sms,want", [
    (512, 1024, 6272, 132, 4),      # 32 tiles: 4 parts fill 128 of 132 multiprocessors
    (64, 64, 100352, 132, 131),     # one tile, 1568 slices: 12 slices a part, as with 132
    (2048, 2048, 1568, 132, 1),     # 256 tiles: no split
    (2048, 512, 1568, 132, 1),      # 64 tiles of 25 slices: the reduction costs more (H200:
                                    # 11.1 us unsplit, 21.8 in 2 parts)
    (64, 64, 1024, 132, None),      # 16 slices: at most 4 parts, 128 multiprocessors idle
    (8, 32, 32, 132, None),         # a squeeze-excite layer: one slice
])
def test_backward_weight_splits_fill_the_gpu(m, n, k, sms, want):
    from cupyconv._gemm.tma_splits import weight_splits

    assert weight_splits(m, n, k, sms) == want


def test_split_estimate_charges_the_reduction():
    """The split-K estimate: parts shorten the slices each unit runs, rounds past the
    multiprocessors lengthen them, and a split adds the reduction (its launch and the fp32
    parts written and read back)."""
    from cupyconv._gemm import tma_splits as t

    one = t.split_seconds(10, 100, 1, 10 * 128 * 128, 132, t.SLICE_S)
    assert one == pytest.approx(t.LAUNCH_FIXED_S + 100 * t.SLICE_S)
    two = t.split_seconds(10, 100, 2, 10 * 128 * 128, 132, t.SLICE_S)
    assert two == pytest.approx(t.LAUNCH_FIXED_S + 50 * t.SLICE_S + t.REDUCE_FIXED_S
                                + 2 * 10 * 128 * 128 * 8 / t.REDUCE_BANDWIDTH)
    # 100 tiles in 2 parts: two rounds of 50 slices, no faster than one round of 100
    assert t.split_seconds(100, 100, 2, 1, 132, t.SLICE_S) > t.split_seconds(100, 100, 1, 1, 132,
                                                                               t.SLICE_S)
    assert t.best_splits(100, 100, 100 * 128 * 128, 132, t.SLICE_S) == 1
    assert t.best_splits(1, 1000, 64 * 64, 132, t.SLICE_S) > 64   # long k, one small tile
    assert t.best_splits(1, 7, 64 * 64, 132, t.SLICE_S) == 1      # parts of 4 slices at least


@pytest.mark.parametrize("tiles,slices,want", [
    (16, 100, 0),    # under 1 / 8 of 132 multiprocessors: the implicit loop
    (52, 32, 1),     # ResNet-50's 1x1 2048 -> 512 at 7^2: unsplit beats any split
    (5, 1000, 0),    # too few tiles, however long k
    (20, 400, 6),    # long k over 20 tiles: parts fill the multiprocessors once
])
def test_few_tile_splits(tiles, slices, want):
    from cupyconv._gemm.tma_splits import few_tile_splits

    assert few_tile_splits(tiles, slices, 132, tiles * 128 * 128) == want


@pytest.mark.parametrize("m,n,wide,want", [
    (8192, 8192, True, 0),    # 2048 wide tiles: 15.5 rounds of 132 multiprocessors
    (4096, 4096, True, 0),    # 512: 3.9 rounds
    (2048, 4096, True, 1),    # 256 wide tiles, under two rounds: 128 x 128
    (8192, 8192, False, 1),   # the convolutions keep 128 x 128
    (1024, 1152, True, 1),    # 72 128 x 128 tiles: half a round, enough
    (1024, 1024, True, None),  # 64: too few, the other loop (it splits K)
])
def test_the_dense_gemm_takes_the_wide_tile_from_two_rounds_of_it(monkeypatch, m, n, wide, want):
    import cupyconv._core.launch as launch

    monkeypatch.setattr(tma, "runs_on_tma", lambda a, b, c, tile, precision="exact": True)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    c = _fake((m, n))
    c.data.device_id = 0
    got = tma.gemm_tile(_fake((m, 64)), _fake((64, n)), c, wide=wide)
    assert got == (None if want is None else TMA_TILES[want])


def _fake4(shape, dtype="float16", ptr=0x10000):
    dt = numpy_dtype(dtype)
    strides = tuple(int(np.prod(shape[i + 1:])) * dt.itemsize for i in range(len(shape)))
    return SimpleNamespace(ndim=len(shape), shape=tuple(shape), dtype=dt, strides=strides,
                           data=SimpleNamespace(ptr=ptr), flags=SimpleNamespace(c_contiguous=True))


def test_the_im2col_window_covers_exactly_the_output_pixels():
    from cupyconv._gemm.tma_conv import check_im2col

    # 3x3, stride 2, padding 1 on 14 x 15: 7 x 8 outputs; the last window starts at
    # ((7 - 1) 2 - 1, (8 - 1) 2 - 1) = (11, 13), so the upper corners are 11 - 13 and 13 - 14
    f = check_im2col(_fake4((2, 14, 15, 64)), _fake4((32, 3, 3, 64)), (2, 2), (1, 1),
                             (1, 1))
    assert (f["oh"], f["ow"], f["m"]) == (7, 8, 2 * 7 * 8)
    assert f["lower"] == (-1, -1) and f["upper"] == (13 - 14, 11 - 13)


@pytest.mark.parametrize("x,w,stride,padding,dilation,error,words", [
    ((2, 8, 8, 12), (4, 3, 3, 12), 1, 1, 1, ValueError, "multiple of 8"),
    ((2, 8, 8, 16), (4, 3, 3, 8), 1, 1, 1, ValueError, "input channels"),
    ((2, 8, 8, 16), (4, 3, 3, 16), 1, 200, 1, ValueError, "range"),
    ((2, 300, 300, 16), (4, 3, 3, 16), 1, 1, 130, ValueError, "range"),  # (a 261-pixel reach)
    ((2, 8, 8, 16), (4, 3, 3, 16), 9, 1, 1, ValueError, "stride"),
    ((2, 2, 2, 16), (4, 5, 5, 16), 1, 0, 1, ValueError, "empty"),
])
def test_im2col_forward_checks_name_the_problem(x, w, stride, padding, dilation, error, words):
    from cupyconv._gemm.tma_conv import check_im2col

    with pytest.raises(error, match=words):
        check_im2col(_fake4(x), _fake4(w), (stride,) * 2, (padding,) * 2, (dilation,) * 2)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        check_im2col(_fake4(x, "float64"), _fake4(w, "float64"), (1, 1), (1, 1), (1, 1))


def test_im2col_takes_float32_for_tf32_in_the_forward_only():
    """float32 is TF32 on the im2col mode: the forward (w [K][taps][C], K-major) with channel
    rows of 16 bytes (4 floats), not backward-data (it reads w MN-major)."""
    from cupyconv._gemm.tma_conv import check_im2col

    f = check_im2col(_fake4((2, 8, 8, 36), "float32"), _fake4((4, 3, 3, 36), "float32"),
                     (1, 1), (1, 1), (1, 1))
    assert f["dtype"] == "float32" and f["c"] == 36
    with pytest.raises(ValueError, match="multiple of 4"):
        check_im2col(_fake4((2, 8, 8, 34), "float32"), _fake4((4, 3, 3, 34), "float32"),
                     (1, 1), (1, 1), (1, 1))
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        check_im2col(_fake4((2, 8, 8, 32), "float32"), _fake4((32, 3, 3, 32), "float32"),
                     (1, 1), (1, 1), (1, 1), data=True)


def test_a_strided_out_view_gives_the_epilogue_its_row_pitches():
    """A stride phase's rows of dx, dx[:, p::2, q::2, :] (contiguous channels), are written in
    place through element pitches (image, row, pixel); a view without contiguous channels or
    with pitches that break 16-byte rows is refused."""
    from cupyconv._gemm.tma_conv import check_im2col

    def view(shape, strides):
        return SimpleNamespace(ndim=4, shape=shape, dtype=numpy_dtype("float16"),
                               strides=tuple(2 * v for v in strides),
                               data=SimpleNamespace(ptr=0x10000),
                               flags=SimpleNamespace(c_contiguous=False))

    x, w = _fake4((2, 7, 8, 64)), _fake4((32, 2, 2, 64))
    # dx (2, 14, 16, 32): the phase's 7 x 8 rows, every other row and column
    f = check_im2col(x, w, (1, 1), (0, 0), (1, 1), view((2, 7, 8, 32), (14 * 16 * 32,
                     2 * 16 * 32, 2 * 32, 1)), out_hw=(7, 8))
    assert f["out_pitches"] == (14 * 16 * 32, 2 * 16 * 32, 64)
    assert check_im2col(x, w, (1, 1), (0, 0), (1, 1), _fake4((2, 7, 8, 32)),
                        out_hw=(7, 8))["out_pitches"] is None
    with pytest.raises(ValueError, match="contiguous channels"):
        check_im2col(x, w, (1, 1), (0, 0), (1, 1), view((2, 7, 8, 32), (1792, 256, 32, 2)),
                     out_hw=(7, 8))
    with pytest.raises(ValueError, match="multiples of 8"):
        check_im2col(x, w, (1, 1), (0, 0), (1, 1), view((2, 7, 8, 32), (1796, 256, 36, 1)),
                     out_hw=(7, 8))


def test_backward_data_is_a_forward_over_dy_in_the_im2col_window():
    from cupyconv._gemm.tma_conv import check_im2col

    # 3x3, padding 1 on 14 x 15: dy is 14 x 15; as a forward over dy the filter reaches 2 - 1 = 1
    f = check_im2col(_fake4((2, 14, 15, 32)), _fake4((32, 3, 3, 64)), (1, 1), (1, 1), (1, 1),
                     out_hw=(14, 15), data=True)
    assert (f["c"], f["k"], f["m"]) == (32, 64, 2 * 14 * 15)
    assert f["lower"] == (-1, -1) and f["upper"] == (-1, -1)
    with pytest.raises(ValueError, match="stride 1"):
        check_im2col(_fake4((2, 7, 8, 32)), _fake4((32, 3, 3, 64)), (2, 2), (1, 1), (1, 1),
                     out_hw=(14, 15), data=True)
    with pytest.raises(ValueError, match="output channels"):
        check_im2col(_fake4((2, 14, 15, 40)), _fake4((32, 3, 3, 64)), (1, 1), (1, 1), (1, 1),
                     data=True)
    with pytest.raises(ValueError, match="w has 60 channels"):
        check_im2col(_fake4((2, 14, 15, 32)), _fake4((32, 3, 3, 60)), (1, 1), (1, 1), (1, 1),
                     data=True)


@pytest.mark.parametrize("n,want", [(16, 2), (64, 2), (72, 1), (2048, 1), (None, 1)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_convolutions_take_the_narrow_tile_for_outputs_of_64_channels_or_fewer(n, want,
                                                                                    dtype):
    from cupyconv._gemm.tma_splits import conv_tile

    tiles = TMA_TF32_TILES if dtype == "float32" else TMA_TILES
    assert conv_tile(dtype, n) == tiles[want]
