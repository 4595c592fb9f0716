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

    def test_precompile_and_cache(self, arrays):
        x, w = arrays
        jit.clear_cache()
        n = jit.precompile()
        info = jit.cache_info()
        assert n == len(info["modules"]) >= 2 and info["misses"] == n
        cupyconv.conv(x, w, groups=2)
        assert jit.cache_info()["hits"] == 1
        assert all(m["backend"] in ("nvrtc", "hiprtc") for m in info["modules"])
