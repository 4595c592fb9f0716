"""cupyconv.dask's convolutions on a CPU (``cupyconv/dask/convolution.py``): ``conv`` over batch
and spatial chunks, ``conv_transpose`` and ``separable_conv`` over batch chunks, NumPy chunks (the
float64 reference stand-in) equal to the whole-array reference, and the weights one key of the
graph."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
from cupyconv import reference  # noqa: E402


# --------------------------------------------------------------------------- conv
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_over_batch_chunks(spatial, layout):
    rng = np.random.default_rng([spatial, len(layout)])
    sizes = (9, 7, 5)[:spatial]
    shape = (7, 4) + sizes if layout == "NCHW" else (7,) + sizes + (4,)
    kernel = (3, 2, 3)[:spatial]
    wshape = (6, 2) + kernel if layout == "NCHW" else (6,) + kernel + (2,)
    a, w, b = rng.standard_normal(shape), rng.standard_normal(wshape), rng.standard_normal(6)
    # batch chunks (2, 1, 4), and the other axes chunked too (they get merged)
    x = da.from_array(a, chunks=((2, 1, 4),) + tuple((s - 1, 1) for s in shape[1:]))
    kw = dict(stride=(2, 1, 1)[:spatial], padding="same" if spatial == 1 else 1, groups=2,
              layout=layout)
    y = cd.conv(x, w, b, **kw)
    ref = reference.conv(a, w, b, **kw)
    assert y.shape == ref.shape and y.chunks[0] == (2, 1, 4) and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(), ref, rtol=1e-12, atol=1e-12)


def test_conv_keeps_float32():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = cd.conv(da.from_array(a, chunks=(2, 3, 8, 8)), w, padding=1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.compute(), reference.conv(a, w, padding=1), rtol=1e-5, atol=1e-5)


def test_conv_bad_arguments_fail_before_compute():
    with pytest.raises(ValueError, match="batched"):
        cd.conv(da.zeros((3, 8, 8), chunks=1), np.ones((2, 3, 3, 3)))
    with pytest.raises(ValueError):
        cd.conv(da.zeros((2, 3, 8, 8), chunks=1), np.ones((2, 4, 3, 3)))  # channel mismatch
    with pytest.raises(TypeError, match="concrete"):
        cd.conv(da.zeros((2, 3, 8, 8), chunks=1), da.ones((2, 3, 3, 3)))


# --------------------------------------------------------------------------- spatial chunks
SPATIAL_CASES = [
    # (x shape, chunks, w shape, options)
    ((2, 3, 20, 17), (1, 3, (3, 7, 10), (5, 5, 7)), (4, 3, 3, 3), dict(padding=1)),
    ((1, 2, 23, 19), (1, 2, (4, 4, 15), (2, 9, 8)), (3, 2, 3, 2),
     dict(padding=(2, 1), stride=2, dilation=(1, 2))),
    ((1, 2, 23), (1, 1, (4, 4, 15)), (3, 2, 3), dict(padding="same", stride=3)),
    ((1, 2, 23), (1, 2, (1, 2, 20)), (3, 2, 4), dict(padding="same")),  # even kernel
    ((1, 4, 9, 9, 10), (1, 4, (3, 6), (2, 7), (5, 5)), (4, 2, 2, 3, 3),
     dict(padding=((1, 0), (0, 2), (1, 1)), stride=(2, 1, 3), groups=2)),
    ((2, 20, 18, 3), (1, (5, 15), (9, 9), 3), (4, 3, 3, 3),
     dict(padding=1, stride=2, layout="NHWC")),
    ((1, 1, 30, 8), (1, 1, (10, 10, 10), 8), (1, 1, 1, 1), dict(stride=4)),  # 1x1, strided
]


@pytest.mark.parametrize("case", range(len(SPATIAL_CASES)))
def test_conv_over_spatial_chunks(case):
    shape, chunks, wshape, kw = SPATIAL_CASES[case]
    rng = np.random.default_rng(case)
    a, w = rng.standard_normal(shape), rng.standard_normal(wshape)
    b = rng.standard_normal(wshape[0])
    y = cd.conv(da.from_array(a, chunks=chunks), w, b, **kw)
    ref = reference.conv(a, w, b, **kw)
    assert y.shape == ref.shape and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(scheduler="synchronous"), ref, rtol=1e-12, atol=1e-12)


def test_conv_spatial_chunks_float32_and_activation():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 3, 40, 40)).astype(np.float32)
    w = rng.standard_normal((5, 3, 5, 5)).astype(np.float32)
    y = cd.conv(da.from_array(a, chunks=(1, 3, 9, 16)), w, padding=2, activation="relu")
    assert y.dtype == np.float32 and len(y.chunks[2]) > 1
    np.testing.assert_allclose(y.compute(), reference.conv(a, w, padding=2, activation="relu"),
                               rtol=1e-5, atol=1e-4)
    with pytest.raises(TypeError, match="z"):
        cd.conv(da.from_array(a, chunks=(1, 3, 9, 16)), w, padding=2, z=np.zeros(1))


# --------------------------------------------------------------------------- conv_transpose
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_transpose_over_batch_chunks(spatial, layout):
    rng = np.random.default_rng([spatial, len(layout), 7])
    sizes = (6, 5, 4)[:spatial]
    shape = (5, 4) + sizes if layout == "NCHW" else (5,) + sizes + (4,)
    kernel = (3, 2, 3)[:spatial]
    wshape = (4, 3) + kernel if layout == "NCHW" else (4,) + kernel + (3,)
    a, w, b = rng.standard_normal(shape), rng.standard_normal(wshape), rng.standard_normal(6)
    x = da.from_array(a, chunks=((2, 1, 2),) + tuple((s - 1, 1) for s in shape[1:]))
    kw = dict(stride=(2, 1, 3)[:spatial], padding=1, output_padding=(1, 0, 2)[:spatial],
              dilation=(1, 2, 1)[:spatial], groups=2, layout=layout)
    y = cd.conv_transpose(x, w, b, **kw)
    ref = reference.conv_transpose(a, w, b, **kw)
    assert y.shape == ref.shape and y.chunks[0] == (2, 1, 2) and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(), ref, rtol=1e-12, atol=1e-12)


def test_conv_transpose_bad_arguments_fail_before_compute():
    x = da.zeros((2, 3, 8, 8), chunks=1)
    with pytest.raises(ValueError, match="string modes|padding"):
        cd.conv_transpose(x, np.ones((3, 2, 3, 3)), padding="same")
    with pytest.raises(ValueError, match="channels"):
        cd.conv_transpose(x, np.ones((4, 2, 3, 3)))
    with pytest.raises(ValueError, match="output_padding"):
        cd.conv_transpose(x, np.ones((3, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(TypeError, match="concrete"):
        cd.conv_transpose(x, da.ones((3, 2, 3, 3)))
    with pytest.raises(ValueError, match="empty"):
        cd.conv_transpose(x, np.ones((3, 2, 3, 3)), padding=6)


# --------------------------------------------------------------------------- separable_conv
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [1, 2])
def test_separable_conv_over_batch_chunks(spatial, layout):
    rng = np.random.default_rng([spatial, len(layout), 13])
    c, m, k = 3, 2, 5
    sizes = (9, 7)[:spatial]
    kernel = (3, 5)[:spatial]
    shape = (6, c) + sizes if layout == "NCHW" else (6,) + sizes + (c,)
    wdw = (m * c, 1) + kernel if layout == "NCHW" else (m * c,) + kernel + (1,)
    ones = (1,) * spatial
    wpw = (k, m * c) + ones if layout == "NCHW" else (k,) + ones + (m * c,)
    a, w1, w2 = rng.standard_normal(shape), rng.standard_normal(wdw), rng.standard_normal(wpw)
    b1, b2 = rng.standard_normal(m * c), rng.standard_normal(k)
    x = da.from_array(a, chunks=((4, 2),) + tuple((s - 1, 1) for s in shape[1:]))
    kw = dict(stride=2, padding=1, activation="relu6", layout=layout)
    y = cd.separable_conv(x, w1, w2, b1, b2, method="fused", **kw)  # method: GPU only, dropped
    ref = reference.separable_conv(a, w1, w2, b1, b2, **kw)
    # the reference composes the two reference convolutions
    t = np.clip(reference.conv(a, w1, b1, stride=2, padding=1, groups=c, layout=layout), 0, 6)
    np.testing.assert_allclose(ref, reference.conv(t, w2, b2, layout=layout), rtol=1e-12)
    assert y.shape == ref.shape and y.chunks[0] == (4, 2) and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(), ref, rtol=1e-12, atol=1e-12)


def test_separable_conv_bad_arguments_fail_before_compute():
    x = da.zeros((2, 4, 8, 8), chunks=1)
    wdw, wpw = np.ones((4, 1, 3, 3)), np.ones((5, 4, 1, 1))
    with pytest.raises(ValueError, match="w_pw"):
        cd.separable_conv(x, wdw, np.ones((5, 3, 1, 1)))
    with pytest.raises(ValueError, match="activation"):
        cd.separable_conv(x, wdw, wpw, activation="gelu")
    with pytest.raises(TypeError, match="w_pw must be a concrete"):
        cd.separable_conv(x, wdw, da.ones((5, 4, 1, 1)))
    with pytest.raises(ValueError, match="batched"):
        cd.separable_conv(da.zeros((4, 8, 8), chunks=2), wdw, wpw)


# --------------------------------------------------------------------------- weights
@pytest.mark.parametrize("chunked", ["batch", "spatial"])
def test_weights_are_one_key_every_task_reads(chunked):
    """The weights and bias enter the graph once, as one key that every convolution task
    depends on (a distributed scheduler sends it to each worker once)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 3, 16, 16))
    w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    chunks = (2, 3, 16, 16) if chunked == "batch" else (8, 3, 6, 16)
    y = cd.conv(da.from_array(a, chunks=chunks), w, b, padding=1)
    graph = dict(y.__dask_graph__())
    weight_keys = [key for key in graph if not isinstance(key, tuple)]
    assert len(weight_keys) == 1
    conv_keys = [key for key in graph if isinstance(key, tuple) and key[0] == y.name]
    assert len(conv_keys) == y.npartitions > 1
    assert all(weight_keys[0] in graph[key].dependencies for key in conv_keys), \
        "a conv task does not read the weights key"
    np.testing.assert_allclose(y.compute(), reference.conv(a, w, b, padding=1), rtol=1e-12)
