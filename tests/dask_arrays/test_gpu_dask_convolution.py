"""cupyconv.dask's convolutions on dask arrays of CuPy chunks (one GPU) against cupyconv.conv,
conv_transpose and separable_conv on the whole array, and the float64 reference."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
from dask_gpu_cases import SCHEDULERS, check  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv.dask as cd  # noqa: E402
from cupyconv import reference  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_over_batch_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng(len(layout))
    shape = (7, 4, 12, 10) if layout == "NCHW" else (7, 12, 10, 4)
    wshape = (6, 2, 3, 3) if layout == "NCHW" else (6, 3, 3, 2)
    a = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, wshape).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    kw = dict(stride=(2, 1), padding=1, groups=2, layout=layout)
    x = da.from_array(xd, chunks=((3, 1, 3),) + tuple((s,) for s in shape[1:]))
    check(cd.conv(x, wd, bd, **kw), cupyconv.conv(xd, wd, bd, **kw), scheduler)
    # NumPy weights are accepted too (copied to the device per chunk)
    y = cd.conv(x, w, b, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.conv(a, w, b, **kw), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_over_spatial_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng([len(layout), 3])
    shape = (2, 4, 21, 19) if layout == "NCHW" else (2, 21, 19, 4)
    wshape = (6, 2, 3, 4) if layout == "NCHW" else (6, 3, 4, 2)
    a = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, wshape).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    spatial_chunks = ((5, 1, 15), (8, 11))
    chunks = ((1, 1), (4,)) + spatial_chunks if layout == "NCHW" else \
        ((1, 1),) + spatial_chunks + ((4,),)
    x = da.from_array(xd, chunks=chunks)
    for kw in [dict(padding=1, groups=2),
               dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2), groups=2)]:
        kw["layout"] = layout
        check(cd.conv(x, wd, bd, **kw), cupyconv.conv(xd, wd, bd, **kw), scheduler)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_conv_transpose_over_batch_chunks(scheduler):
    import cupy

    rng = np.random.default_rng(12)
    a = rng.uniform(-1, 1, (5, 4, 9, 7)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 2)).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    kw = dict(stride=2, padding=1, output_padding=1, groups=2)
    x = da.from_array(xd, chunks=((2, 3), 4, 9, 7))
    check(cd.conv_transpose(x, wd, bd, **kw), cupyconv.conv_transpose(xd, wd, bd, **kw),
          scheduler)
    y = cd.conv_transpose(x, w, b, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.conv_transpose(a, w, b, **kw),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_separable_conv_over_batch_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng([len(layout), 5])
    shape = (5, 6, 11, 13) if layout == "NCHW" else (5, 11, 13, 6)
    wdw = (12, 1, 3, 3) if layout == "NCHW" else (12, 3, 3, 1)
    wpw = (7, 12, 1, 1) if layout == "NCHW" else (7, 1, 1, 12)
    a, w1, w2 = (rng.uniform(-1, 1, s).astype(np.float32) for s in (shape, wdw, wpw))
    b1, b2 = (rng.uniform(-1, 1, n).astype(np.float32) for n in (12, 7))
    dev = [cupy.asarray(v) for v in (a, w1, w2, b1, b2)]
    kw = dict(stride=2, padding=1, activation="relu", layout=layout)
    x = da.from_array(dev[0], chunks=((2, 3),) + tuple((s,) for s in shape[1:]))
    for method in ("fused", "unfused"):
        check(cd.separable_conv(x, *dev[1:], method=method, **kw),
              cupyconv.separable_conv(*dev, method=method, **kw), scheduler)
    y = cd.separable_conv(x, w1, w2, b1, b2, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.separable_conv(a, w1, w2, b1, b2, **kw),
                               rtol=1e-4, atol=1e-4)
