"""The tensor-core main loops (gemm_mma.cuh) on the GPU: every tile, loader mapping and split of
the dense GEMM, the implicit forward, backward-data and backward-weight kernels, for float16,
bfloat16 and TF32, on the mma.sync loop and (on Hopper) the wgmma loop, against float64 references; and TF32's error against PyTorch's on the same
inputs.  float16/bfloat16 results must be within 2x the rounding of the float64 result to the
storage type (``verify.tolerance``); TF32 results within 2x the error of the float64 computation
on TF32-rounded inputs (``verify.tf32_tolerance``)."""

import contextlib

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.kernels import (GEMM_VARIANTS, MATH_MMA, MATH_TF32, MATH_WGMMA,
                                    MATH_WGMMA_TF32, MMA_TILES, WGMMA_KINDS)
from cupyconv._core.precision import gemm_math
from cupyconv._core.verify import (poison, random_array, rel_error, round_tf32, tf32_tolerance,
                                   tolerance)
from cupyconv._gemm.kernel_args import MatrixView, OutMap
from cupyconv._gemm.launch import forced_plan, record_plans, run_gemm
from cupyconv._gemm.plans import GemmPlan

from gpu_cases import CASES, LAYOUTS, case_id, rng_for, shapes

pytestmark = pytest.mark.gpu
HALF_DTYPES = ("float16", "bfloat16")


def _f64(a):
    import cupy

    return cupy.asarray(a).astype(cupy.float64)


def _check(out, ref, dtype, ref_rounded=None):
    """``out`` against the float64 ``ref``: storage-type bound, or the TF32 bound when
    ``ref_rounded`` (the reference on TF32-rounded inputs) is given."""
    ref = ref.get() if hasattr(ref, "get") else ref
    if ref_rounded is not None:
        ref_rounded = ref_rounded.get() if hasattr(ref_rounded, "get") else ref_rounded
        bound = tf32_tolerance(ref, ref_rounded)
    else:
        bound = tolerance(dtype, ref)
    err = rel_error(out, ref)
    assert err <= bound, f"relative error {err:.3e} > bound {bound:.3e}"


def test_device_has_tensor_cores():
    """The GPU suite runs on sm_80+: the 16-bit types and TF32 must get the tensor-core loop
    (otherwise every test here would silently exercise the SIMT loop)."""
    import cupy

    dev = cupy.cuda.Device().id
    half = MATH_WGMMA if _has_wgmma() else MATH_MMA
    assert gemm_math("float16", "exact", dev) == half
    assert gemm_math("bfloat16", "exact", dev) == half
    assert gemm_math("float32", "tf32", dev) == (MATH_WGMMA_TF32 if _has_wgmma() else MATH_TF32)
    assert gemm_math("float32", "exact", dev) == 0


def _has_wgmma() -> bool:
    import cupy

    return cupy.cuda.Device().compute_capability == "90"


KINDS = [("float16", "exact"), ("bfloat16", "exact"), ("float32", "tf32")]
# Every main loop with its dtypes: the conv tests run the launch's own (default) loop, and for the
# 16-bit types also the mma.sync loop forced on a device whose default is wgmma.
LOOPS = [(MATH_MMA, "float16", "exact"), (MATH_MMA, "bfloat16", "exact"),
         (MATH_TF32, "float32", "tf32"), (MATH_WGMMA, "float16", "exact"),
         (MATH_WGMMA, "bfloat16", "exact"), (MATH_WGMMA_TF32, "float32", "tf32")]
CONV_KINDS = [(d, p, "default") for d, p in KINDS] + [(d, p, "mma") for d, p in KINDS]


def _loop(name: str, dtype: str):
    """The context a conv test runs in: the launches' default loop, or mma.sync forced."""
    if name == "default":
        return contextlib.nullcontext()
    math = MATH_TF32 if dtype == "float32" else MATH_MMA
    return forced_plan(GemmPlan(MMA_TILES[math][0], 1, 0.0, math))


@pytest.mark.parametrize("math_kind,dtype,precision", LOOPS, ids=lambda v: str(v))
@pytest.mark.parametrize("tile_index", [0, 1, 2])
@pytest.mark.parametrize("variant", GEMM_VARIANTS)
@pytest.mark.parametrize("splits", [1, 3])
def test_every_tile_loader_mapping_and_split(math_kind, dtype, precision, tile_index, variant,
                                             splits):
    import cupy

    if math_kind in WGMMA_KINDS and not _has_wgmma():
        pytest.skip("wgmma needs compute capability 9.0")
    tile = MMA_TILES[math_kind][tile_index]
    rng = rng_for("mma-tile", dtype, tile, variant, splits)
    # vector and scalar paths; k-contiguous 16-byte rows with partial slices (the copy paths)
    for m, n, k in [(130, 72, 100), (131, 69, 37), (257, 129, 200), (200, 136, 264)]:
        a = cupy.asarray(random_array(rng, (m, k), dtype))
        b = cupy.asarray(random_array(rng, (k, n), dtype))
        bias = cupy.asarray(random_array(rng, (n,), dtype))
        a_op = a if variant[0] else cupy.asfortranarray(a)
        b_op = cupy.asfortranarray(b) if variant[1] else b
        sa = [s // a.itemsize for s in a_op.strides]
        sb = [s // b.itemsize for s in b_op.strides]
        av, bv = MatrixView(a_op, sa[0], sa[1]), MatrixView(b_op, sb[1], sb[0])
        c = poison(cupy.empty((m, n), dtype))
        with record_plans() as log:
            run_gemm(dtype, av, bv, c, m, n, k, out=OutMap(m, 0, n, 1), bias=bias,
                     plan=GemmPlan(tile, splits, 0.0, math_kind), precision=precision)
        assert log[0][2].math == math_kind and log[0][2].tile == tile
        ref = _f64(a) @ _f64(b) + _f64(bias)
        rounded = None
        if precision == "tf32":
            rounded = (cupy.asarray(round_tf32(a)).astype(cupy.float64)
                       @ cupy.asarray(round_tf32(b)).astype(cupy.float64) + _f64(bias))
        _check(c, ref, dtype, rounded)


@pytest.mark.parametrize("dtype,precision", KINDS, ids=lambda v: str(v))
def test_public_gemm_batches_and_views(dtype, precision):
    import cupy

    rng = rng_for("mma-public", dtype)
    a = cupy.asarray(random_array(rng, (3, 200, 96), dtype))
    b = cupy.asarray(random_array(rng, (96, 72), dtype))
    for aa, bb in ((a, b), (a[:, ::-1], b), (a[1].T[:, :50], b[:50, ::2])):
        got = cupyconv.gemm(aa, bb, precision=precision)
        rounded = None
        if precision == "tf32":
            rounded = cupy.asarray(round_tf32(aa)).astype(cupy.float64) @ cupy.asarray(
                round_tf32(bb)).astype(cupy.float64)
        _check(got, _f64(aa) @ _f64(bb), dtype, rounded)


def test_tf32_env_default(monkeypatch):
    """CUPYCONV_ALLOW_TF32=1 makes float32 calls without ``precision`` run TF32; an explicit
    precision="exact" still gets the exact loop."""
    import cupy

    rng = rng_for("tf32-env")
    a = cupy.asarray(random_array(rng, (256, 512)))
    b = cupy.asarray(random_array(rng, (512, 256)))
    ref = _f64(a) @ _f64(b)
    exact = rel_error(cupyconv.gemm(a, b), ref)
    monkeypatch.setenv("CUPYCONV_ALLOW_TF32", "1")
    tf32 = rel_error(cupyconv.gemm(a, b), ref)
    assert rel_error(cupyconv.gemm(a, b, precision="exact"), ref) == exact
    assert exact < 1e-6 < tf32 < 1e-2  # the env default really changed the arithmetic


def _conv_inputs(case, layout, dtype, rng):
    xs, ws = shapes(case, layout)
    return random_array(rng, xs, dtype), random_array(rng, ws, dtype), random_array(rng, (case["k"],), dtype)


def _refs(fn, arrays, precision, **opts):
    """float64 reference, and for TF32 the reference on TF32-rounded inputs."""
    ref = fn(*[np.asarray(a, np.float64) if a is not None else None for a in arrays], **opts)
    if precision != "tf32":
        return ref, None
    rounded = [round_tf32(a).astype(np.float64) if a is not None else None for a in arrays]
    return ref, fn(*rounded, **opts)


CONV_GRID = [pytest.param(c, lay, id=f"{case_id(c)}-{lay}") for c in CASES for lay in LAYOUTS]


@pytest.mark.parametrize("dtype,precision,loop", CONV_KINDS, ids=lambda v: str(v))
@pytest.mark.parametrize("method", ["auto", "implicit_gemm"])
@pytest.mark.parametrize("case,layout", CONV_GRID)
def test_forward(case, layout, dtype, precision, loop, method):
    import cupy

    rng = rng_for("mma-fwd", case_id(case), layout, dtype, method)
    xh, wh, bh = _conv_inputs(case, layout, dtype, rng)
    opts = dict(case["opts"], layout=layout)
    y = poison(cupy.empty(reference.conv(np.asarray(xh, np.float64), np.asarray(wh, np.float64),
                                         **opts).shape, dtype))
    with _loop(loop, dtype):
        cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh), method=method,
                      precision=precision, out=y, **opts)
    # the bias is exact in the epilogue: not rounded to TF32
    ref, rounded = _refs(lambda x, w: reference.conv(x, w, np.asarray(bh, np.float64), **opts),
                         (xh, wh), precision)
    _check(y, ref, dtype, rounded)


@pytest.mark.parametrize("dtype,precision,loop", CONV_KINDS, ids=lambda v: str(v))
@pytest.mark.parametrize("case,layout", CONV_GRID)
def test_backward_data_and_weight(case, layout, dtype, precision, loop):
    import cupy

    rng = rng_for("mma-bwd", case_id(case), layout, dtype)
    xh, wh, _ = _conv_inputs(case, layout, dtype, rng)
    opts = dict(case["opts"], layout=layout)
    yshape = reference.conv(np.asarray(xh, np.float64), np.asarray(wh, np.float64), **opts).shape
    dyh = random_array(rng, yshape, dtype)
    dx = poison(cupy.empty(xh.shape, dtype))
    with _loop(loop, dtype):
        cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), xh.shape, out=dx,
                                    precision=precision, **opts)
    ref, rounded = _refs(lambda dy, w: reference.conv_backward_data(dy, w, xh.shape, **opts),
                         (dyh, wh), precision)
    _check(dx, ref, dtype, rounded)
    dw = poison(cupy.empty(wh.shape, dtype))
    with _loop(loop, dtype):
        cupyconv.conv_backward_weight(cupy.asarray(xh), cupy.asarray(dyh), wh.shape, out=dw,
                                      precision=precision, **opts)
    ref, rounded = _refs(lambda x, dy: reference.conv_backward_weight(x, dy, wh.shape, **opts),
                         (xh, dyh), precision)
    _check(dw, ref, dtype, rounded)


# ResNet-like layers, where the tensor-core loop runs with full k-slices and several blocks.
LAYERS = [((4, 64, 28, 28), (64, 64, 3, 3), dict(padding=1)),
          ((2, 128, 14, 14), (256, 128, 1, 1), dict(stride=2)),
          ((2, 3, 40, 40), (64, 3, 7, 7), dict(stride=2, padding=3)),
          ((2, 512, 7, 7), (512, 512, 3, 3), dict(padding=1))]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda v: "x".join(map(str, v[1])))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype,precision", KINDS, ids=lambda v: str(v))
def test_error_within_twice_pytorchs(layer, layout, dtype, precision):
    """Forward, backward-data and backward-weight errors (against float64) at most 2x PyTorch's
    (cuDNN) at the same precision on the same inputs, plus a float32-rounding floor.  With TF32
    allowed cuDNN still runs some problems exactly, so there the bound is 2x the larger of
    PyTorch's error and that of the float64 computation on TF32-rounded inputs."""
    import cupy
    import torch

    xs, ws, opts = layer
    rng = rng_for("vs-torch", xs, ws, layout, dtype)
    tdtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    x64 = rng.uniform(-1, 1, xs)
    w64 = rng.uniform(-1, 1, ws)
    xt = torch.tensor(x64, device="cuda").to(tdtype)
    wt = torch.tensor(w64, device="cuda").to(tdtype)
    x64, w64 = xt.double(), wt.double()  # the values both see
    prev = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        y_ref = torch.nn.functional.conv2d(x64, w64, **opts)
        y_t = torch.nn.functional.conv2d(xt, wt, **opts)
        dy64 = torch.tensor(rng.uniform(-1, 1, tuple(y_ref.shape)), device="cuda")
        dy_t = dy64.to(tdtype)
        dy64 = dy_t.double()
        dx_ref = torch.nn.grad.conv2d_input(xs, w64, dy64, **opts)
        dx_t = torch.nn.grad.conv2d_input(xs, wt, dy_t, **opts)
        dw_ref = torch.nn.grad.conv2d_weight(x64, ws, dy64, **opts)
        dw_t = torch.nn.grad.conv2d_weight(xt, ws, dy_t, **opts)
    finally:
        torch.backends.cudnn.allow_tf32 = prev

    def to_cupy(t):
        if layout == "NHWC":
            t = t.permute(0, *range(2, t.ndim), 1)
        return cupy.from_dlpack(t.contiguous())

    def err(ours, ref):
        if not isinstance(ours, cupy.ndarray):
            ours = to_cupy(ours)
        return rel_error(ours.astype(cupy.float64), to_cupy(ref))

    def tf32_ideal(fn, *arrays):
        if precision != "tf32":
            return 0.0
        rounded = [torch.from_numpy(round_tf32(a.cpu().numpy())).double().cuda() for a in arrays]
        return err(fn(*rounded), fn(*[a.double() for a in arrays]))

    x, w, dy = to_cupy(xt), to_cupy(wt), to_cupy(dy_t)
    y = cupyconv.conv(x, w, layout=layout, precision=precision, **opts)
    dx = cupyconv.conv_backward_data(dy, w, x.shape, layout=layout, precision=precision, **opts)
    dw = cupyconv.conv_backward_weight(x, dy, w.shape, layout=layout, precision=precision, **opts)
    ideal = {"forward": tf32_ideal(lambda a, b: torch.nn.functional.conv2d(a, b, **opts), xt, wt),
             "backward-data": tf32_ideal(lambda a, b: torch.nn.grad.conv2d_input(xs, a, b, **opts),
                                         wt, dy_t),
             "backward-weight": tf32_ideal(lambda a, b: torch.nn.grad.conv2d_weight(a, ws, b, **opts),
                                           xt, dy_t)}
    for name, ours, ref, peer in (("forward", y, y_ref, y_t), ("backward-data", dx, dx_ref, dx_t),
                                  ("backward-weight", dw, dw_ref, dw_t)):
        e_ours, e_peer = err(ours, ref), err(peer, ref)
        bound = 2 * max(e_peer, ideal[name]) + 1e-6
        assert e_ours <= bound, f"{name}: ours {e_ours:.2e}, PyTorch {e_peer:.2e}"
