"""Argument checking of the public GPU functions: every error is raised before any kernel is
compiled or launched, names the argument, and leaves ``out`` untouched."""

import subprocess
import sys

import numpy as np
import pytest

import cupyconv
from cupyconv import jit


def test_import_needs_no_gpu_and_compiles_nothing():
    code = ("import sys, cupyconv; "
            "assert 'cupy' not in sys.modules, 'import cupyconv imported cupy'; "
            "assert cupyconv.jit.cache_info()['misses'] == 0; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_numpy_input_is_refused_with_a_hint():
    x = np.ones((1, 2, 5, 5), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(TypeError, match=r"x must be a cupy.ndarray.*cupy.asarray\(x\)"):
        cupyconv.conv(x, w)
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        cupyconv.conv([[1.0]], w)


def test_bad_method_is_refused():
    with pytest.raises(ValueError, match="method must be one of"):
        cupyconv.conv(None, None, method="winograd")


def test_public_api_is_exported():
    for name in ("conv", "conv1d", "conv2d", "conv3d", "im2col", "output_shape", "reference",
                 "jit"):
        assert hasattr(cupyconv, name), name
    assert cupyconv.output_shape((32, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3) == \
        (32, 64, 112, 112)
    for fn in (jit.precompile, jit.cache_info, jit.clear_cache):
        assert fn.__doc__


@pytest.mark.gpu
class TestOnDevice:
    @pytest.fixture
    def arrays(self):
        import cupy

        rng = np.random.default_rng(1)
        x = cupy.asarray(rng.standard_normal((2, 4, 9, 9)).astype(np.float32))
        w = cupy.asarray(rng.standard_normal((6, 2, 3, 3)).astype(np.float32))
        return x, w

    @pytest.mark.parametrize("kwargs,exc,match", [
        (dict(groups=3), ValueError, "divisible by groups"),
        (dict(groups=1), ValueError, "does not fit layout"),
        (dict(groups=2, stride=0), ValueError, "stride"),
        (dict(groups=2, padding=(1, 2, 3)), ValueError, "padding"),
        (dict(groups=2, padding="full"), ValueError, "padding"),
        (dict(groups=2, dilation=6), ValueError, "larger than the padded input"),
        (dict(groups=2, layout="NWC"), ValueError, "layout"),
        (dict(groups=2, method="nope"), ValueError, "method"),
    ])
    def test_errors_come_before_any_compile(self, arrays, kwargs, exc, match):
        import cupy

        x, w = arrays
        out = cupy.full((2, 6, 7, 7), 7.0, cupy.float32)
        jit.clear_cache()
        with pytest.raises(exc, match=match):
            cupyconv.conv(x, w, out=out, **kwargs)
        assert jit.cache_info()["misses"] == 0
        assert bool((out == 7.0).all())

    def test_operand_errors(self, arrays):
        import cupy

        x, w = arrays
        ok = dict(groups=2)
        with pytest.raises(TypeError, match="w has dtype float64 but the input has dtype float32"):
            cupyconv.conv(x, w.astype(cupy.float64), **ok)
        with pytest.raises(TypeError, match="supported dtypes"):
            cupyconv.conv(x.astype(cupy.int32), w.astype(cupy.int32), **ok)
        with pytest.raises(ValueError, match=r"bias must have shape \(6,\)"):
            cupyconv.conv(x, w, cupy.ones(5, cupy.float32), **ok)
        with pytest.raises(TypeError, match="bias has dtype"):
            cupyconv.conv(x, w, cupy.ones(6, cupy.float16), **ok)
        with pytest.raises(ValueError, match=r"out must have shape \(2, 6, 7, 7\)"):
            cupyconv.conv(x, w, out=cupy.empty((2, 6, 9, 9), cupy.float32), **ok)
        with pytest.raises(TypeError, match="out must have dtype float32"):
            cupyconv.conv(x, w, out=cupy.empty((2, 6, 7, 7), cupy.float64), **ok)
        with pytest.raises(ValueError, match="C-contiguous"):
            cupyconv.conv(x, w, out=cupy.empty((2, 7, 7, 6), cupy.float32).transpose(0, 3, 1, 2),
                          **ok)
        with pytest.raises(TypeError, match="out must be a cupy.ndarray"):
            cupyconv.conv(x, w, out=np.empty((2, 6, 7, 7), np.float32), **ok)
        with pytest.raises(ValueError, match="expected a 5-d input"):
            cupyconv.conv3d(x, w, **ok)

    def test_mixed_bfloat16_and_float16_is_refused_before_any_compile(self, arrays):
        import cupy
        import ml_dtypes

        x, w = arrays
        xb, wh = x.astype(ml_dtypes.bfloat16), w.astype(cupy.float16)
        jit.clear_cache()
        with pytest.raises(TypeError, match="w has dtype float16 but the input has dtype bfloat16"):
            cupyconv.conv(xb, wh, groups=2)
        with pytest.raises(TypeError, match="dy has dtype float16 but the input has dtype bfloat16"):
            cupyconv.conv_backward_weight(xb, cupy.ones((2, 6, 7, 7), cupy.float16), w.shape,
                                          groups=2)
        with pytest.raises(TypeError, match="out must have dtype bfloat16, got float16"):
            cupyconv.conv(xb, w.astype(ml_dtypes.bfloat16), groups=2,
                          out=cupy.empty((2, 6, 7, 7), cupy.float16))
        assert jit.cache_info()["misses"] == 0

    def test_precompile_and_cache(self, arrays):
        x, w = arrays
        jit.clear_cache()
        n = jit.precompile()
        info = jit.cache_info()
        assert n == len(info["modules"]) >= 2 and info["misses"] == n
        cupyconv.conv(x, w, groups=2)
        assert jit.cache_info()["hits"] == 1
        assert all(m["backend"] in ("nvrtc", "hiprtc") for m in info["modules"])


@pytest.mark.gpu
class TestSizeLimitsOnDevice:
    """Sizes beyond the 32-bit extents or 2**48 bytes are named ValueErrors before any
    allocation or compile (never OverflowError or OutOfMemoryError)."""

    BIG = 2 ** 31

    @pytest.fixture(autouse=True)
    def _no_compile(self):
        jit.clear_cache()
        yield
        assert jit.cache_info()["misses"] == 0

    def test_conv_transpose_huge_stride(self):
        import cupy

        x, w = cupy.ones((1, 1, 1, 1), cupy.float32), cupy.ones((1, 1, 1, 1), cupy.float32)
        with pytest.raises(ValueError, match=r"stride must be < 2\*\*31"):
            cupyconv.conv_transpose(x, w, stride=self.BIG)
        with pytest.raises(ValueError, match=r"padding must be < 2\*\*31"):
            cupyconv.conv_transpose(x, w, padding=2 ** 40)
        x4 = cupy.ones((1, 1, 1024, 1), cupy.float32)
        with pytest.raises(ValueError, match=r"output size"):
            cupyconv.conv_transpose(x4, w, stride=(2 ** 30, 1))
        # ~2**31 rows (2**21 at stride 2**10), 2**10 output channels, batch 2**16: ~2**59 bytes
        xb = cupy.broadcast_to(cupy.ones((1, 1, 1, 1), cupy.float32), (2 ** 16, 1, 2 ** 21, 1))
        wb = cupy.broadcast_to(cupy.ones((1, 1, 1, 1), cupy.float32), (1, 2 ** 10, 1, 1))
        with pytest.raises(ValueError, match=r"output of conv_transpose .* 2\*\*48 bytes"):
            cupyconv.conv_transpose(xb, wb, stride=(2 ** 10, 1))

    def test_conv_and_gradients(self):
        import cupy

        x, w = cupy.ones((1, 1, 10, 10), cupy.float32), cupy.ones((1, 1, 3, 3), cupy.float32)
        for kw, match in ((dict(stride=self.BIG), "stride"), (dict(padding=2 ** 40), "padding"),
                          (dict(dilation=self.BIG), "dilation"),
                          (dict(padding=2 ** 30), "padded input extent")):
            with pytest.raises(ValueError, match=match):
                cupyconv.conv(x, w, **kw)
            with pytest.raises(ValueError, match=match):
                cupyconv.conv_backward_weight(x, x, (1, 1, 3, 3), **kw)
            with pytest.raises(ValueError, match=match):
                cupyconv.conv_backward_data(x, w, (1, 1, 10, 10), **kw)
        huge = cupy.broadcast_to(cupy.ones((1, 1, 1, 1), cupy.float32),
                                 (2 ** 26, 1, 2 ** 12, 2 ** 12))
        with pytest.raises(ValueError, match=r"2\*\*48 bytes"):
            cupyconv.conv(huge, w)

    def test_im2col_and_gemm(self):
        import cupy

        x = cupy.broadcast_to(cupy.ones((1, 1, 1, 1), cupy.float32), (1, 1, 2 ** 15, 2 ** 15))
        with pytest.raises(ValueError, match=r"im2col matrix .* 2\*\*48 bytes"):
            cupyconv.im2col(x, 2 ** 14)
        with pytest.raises(ValueError, match=r"stride must be < 2\*\*31"):
            cupyconv.im2col(cupy.ones((1, 1, 4, 4), cupy.float32), 1, stride=self.BIG)
        a = cupy.broadcast_to(cupy.ones((1, 1), cupy.float32), (self.BIG, 1))
        b = cupy.ones((1, 4), cupy.float32)
        with pytest.raises(ValueError, match=r"gemm: m .* < 2\*\*31"):
            cupyconv.gemm(a, b)
        a = cupy.broadcast_to(cupy.ones((1, 1), cupy.float32), (2 ** 25, 1))
        b = cupy.broadcast_to(cupy.ones((1, 1), cupy.float32), (1, 2 ** 25))
        with pytest.raises(ValueError, match=r"gemm: the result .* 2\*\*48 bytes"):
            cupyconv.gemm(a, b)

    def test_signal(self):
        import cupy

        a = cupy.broadcast_to(cupy.ones(1, cupy.float32), (2 ** 47,))
        with pytest.raises(ValueError, match=r"2\*\*48 bytes"):
            cupyconv.signal.correlate(a, a)
        long = cupy.broadcast_to(cupy.ones(1, cupy.float32), (2 ** 31,))
        with pytest.raises(ValueError, match=r"method='direct'"):
            cupyconv.signal.correlate(long, cupy.ones(3, cupy.float32), mode="same",
                                      method="direct")


def test_precompile_problems_are_checked_before_anything_runs():
    """A malformed problem is refused by name, before any array is made (so also without a GPU)."""
    with pytest.raises(ValueError, match=r"needs the shapes of x and w.*lacks \['w'\]"):
        jit.modules_for([dict(x=(1, 3, 8, 8))])
    with pytest.raises(ValueError, match="passes must be among"):
        jit.precompile(problems=[dict(x=(1, 3, 8, 8), w=(4, 3, 3, 3), passes=("sideways",))])
    with pytest.raises(TypeError, match="a problem is a ConvGeometry or a mapping"):
        jit.modules_for([((1, 3, 8, 8), (4, 3, 3, 3))])
    assert jit.cache_info()["misses"] == 0
