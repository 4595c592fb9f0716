"""cupyconv.dask's face and what runs on a chunk (``cupyconv/dask/__init__.py``, ``chunks.py``):
the public names, Dask imported only when a function runs, the error that names the missing extra,
inputs that are not dask arrays, and ``gpu=`` checked before anything is computed."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402

import cupyconv.dask as cd  # noqa: E402


# --------------------------------------------------------------------------- the package
def test_the_public_names_are_importable_from_the_package():
    """The package's face: every name the one-file module had (``__all__`` and the two public
    names outside it) is importable from ``cupyconv.dask``."""
    assert sorted(cd.__all__) == sorted([
        "correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
        "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "sobel", "prewitt", "laplace",
        "gaussian_laplace", "gaussian_gradient_magnitude", "signal_correlate", "signal_convolve",
        "conv", "conv_transpose", "separable_conv", "filter_reach", "rechunk_for_depth",
        "window_chunks", "distribute", "block_owners", "chunk_owners", "halo_transfer"])
    for name in cd.__all__ + ["assemble_halo", "TRIM_VIEW_MAX_GROWTH"]:
        assert getattr(cd, name) is not None, name
    from cupyconv.dask import TRIM_VIEW_MAX_GROWTH, assemble_halo, distribute  # noqa: F401


def test_the_package_names_the_module_and_imports_no_dask():
    import subprocess
    import sys

    import cupyconv

    assert cupyconv.dask is cd and "dask" in cupyconv.__all__
    code = "import sys, cupyconv; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_dask_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "dask" or name.startswith("dask."):
            raise ImportError("No module named 'dask'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(ImportError, match=r"pip install 'cupyconv\[dask\]'"):
        cd.gaussian_filter(np.zeros(3), 1.0)


# --------------------------------------------------------------------------- bad input
def test_not_a_dask_array():
    a = np.zeros((8, 8))
    with pytest.raises(TypeError, match="dask.array.Array.*from_array"):
        cd.gaussian_filter(a, 1.0)
    with pytest.raises(TypeError, match="x must be a dask.array.Array"):
        cd.conv(a[None, None], np.ones((1, 1, 3, 3)))


# --------------------------------------------------------------------------- gpu=
def test_every_function_takes_gpu_and_checks_it_before_compute():
    import inspect

    x = da.zeros((4, 3, 8, 8), chunks=2)
    for name in cd.__all__:
        fn = getattr(cd, name)
        if name in ("filter_reach", "rechunk_for_depth", "window_chunks", "distribute",
                    "block_owners", "chunk_owners", "halo_transfer"):  # not filters
            continue
        param = inspect.signature(fn).parameters.get("gpu")
        assert param is not None and param.kind is param.KEYWORD_ONLY and param.default is None, \
            name
    with pytest.raises(TypeError, match="gpu must be None, False or True"):
        cd.gaussian_filter(x, 1.0, gpu="yes")
    with pytest.raises(TypeError, match="gpu must be"):
        cd.conv(x, np.ones((2, 3, 3, 3)), gpu=1)
    with pytest.raises(TypeError, match="gpu must be"):
        cd.signal_correlate(x, np.ones((1, 1, 3, 3)), gpu="cuda")
    # gpu=False is the default dispatch: NumPy chunks run the CPU stand-in
    a = np.random.default_rng(2).standard_normal((9, 10))
    np.testing.assert_array_equal(cd.gaussian_filter(da.from_array(a, chunks=4), 1.0,
                                                     gpu=False).compute(),
                                  sn.gaussian_filter(a, 1.0))
