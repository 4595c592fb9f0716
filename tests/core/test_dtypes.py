"""bfloat16 on the host, without a GPU: dtype names and sizes (cupyconv._core.dtypes), the operand
checks, the float64 reference, the tolerance rule and the refusal by the SciPy-compatible API."""

import subprocess
import sys
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core.arrays import require_float_dtype
from cupyconv._core.dtypes import (HALF_DTYPES, compute_dtype, dtype_name, is_real_float, itemsize,
                                   numpy_dtype)
from cupyconv._core.geometry import ConvGeometry, check_tensor_size
from cupyconv._core.kernels import DTYPES
from cupyconv._core.verify import AGREEMENT, random_array, rel_error, tolerance

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_every_kernel_dtype_has_a_size_and_a_compute_type():
    sizes = {d: itemsize(d) for d in DTYPES}
    assert sizes == {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
    assert {d: compute_dtype(d) for d in DTYPES} == {
        "float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
    assert set(HALF_DTYPES) == {d for d in DTYPES if itemsize(d) == 2}
    assert set(AGREEMENT) == set(DTYPES)


@pytest.mark.parametrize("spelling", ["bfloat16", ml_dtypes.bfloat16, BF16])
def test_bfloat16_by_name_type_or_dtype(spelling):
    assert numpy_dtype(spelling) == BF16
    assert dtype_name(spelling) == "bfloat16" and itemsize(spelling) == 2
    assert is_real_float(spelling)
    assert not is_real_float("int32") and not is_real_float("complex64") and is_real_float("float16")


def test_bfloat16_by_name_needs_no_earlier_ml_dtypes_import():
    """np.dtype("bfloat16") fails until ml_dtypes is imported: the geometry must not depend on
    the caller having imported it (a fresh interpreter, nothing imported first)."""
    code = ("import sys; from cupyconv._core.geometry import ConvGeometry; "
            "g = ConvGeometry.from_shapes((1, 2, 5, 5), (3, 2, 3, 3), dtype='bfloat16'); "
            "assert g.dtype == 'bfloat16'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_geometry_counts_two_bytes_per_bfloat16_element():
    g = ConvGeometry.from_shapes((1, 2, 5, 5), (3, 2, 3, 3), dtype=BF16)
    assert g.dtype == "bfloat16" and g == ConvGeometry.from_shapes((1, 2, 5, 5), (3, 2, 3, 3),
                                                                   dtype="bfloat16")
    check_tensor_size("x", (2 ** 47,), "bfloat16")  # exactly 2**48 bytes: at the limit
    with pytest.raises(ValueError, match="2\\*\\*48 bytes"):
        check_tensor_size("x", (2 ** 47 + 1,), "bfloat16")


def _array(dtype):
    """A stand-in for a CuPy array: the dtype check reads only ``.dtype``."""
    return SimpleNamespace(dtype=numpy_dtype(dtype))


def test_operand_dtype_check_accepts_bfloat16_and_names_a_mismatch():
    assert require_float_dtype(_array("bfloat16"), "x") == "bfloat16"
    assert require_float_dtype(_array("bfloat16"), "w", "bfloat16") == "bfloat16"
    with pytest.raises(TypeError, match="w has dtype float16 but the input has dtype bfloat16"):
        require_float_dtype(_array("float16"), "w", "bfloat16")
    with pytest.raises(TypeError, match="bias has dtype bfloat16 but the input has dtype float32"):
        require_float_dtype(_array("bfloat16"), "bias", "float32")
    with pytest.raises(TypeError, match="supported dtypes are float16, bfloat16, float32, float64"):
        require_float_dtype(_array("int16"), "x")


def test_random_array_and_tolerance_of_bfloat16():
    rng = np.random.default_rng(0)
    a = random_array(rng, (64, 33), "bfloat16")
    assert a.dtype == BF16 and a.shape == (64, 33)
    wide = a.astype(np.float64)
    assert np.all(np.abs(wide) <= 1) and np.any(wide != 0)
    ref = rng.uniform(-1, 1, (64, 33))
    t16, tbf16 = tolerance("float16", ref), tolerance("bfloat16", ref)
    assert tbf16 == tolerance(BF16, ref)
    # bfloat16 keeps 3 fewer mantissa bits than float16: about 8x the rounding error
    assert 4 * t16 < tbf16 < 16 * t16
    assert rel_error(ref.astype(ml_dtypes.bfloat16), ref) <= tbf16
    assert rel_error(ref.astype(np.float16), ref) <= tbf16


def test_reference_takes_bfloat16_inputs_in_float64():
    rng = np.random.default_rng(1)
    x, w, b = (random_array(rng, s, "bfloat16") for s in ((2, 3, 7, 6), (4, 3, 3, 3), (4,)))
    y = reference.conv(x, w, b, padding=1)
    assert y.dtype == np.float64
    expect = reference.conv(*(a.astype(np.float64) for a in (x, w, b)), padding=1)
    np.testing.assert_array_equal(y, expect)
    dx = reference.conv_backward_data(random_array(rng, y.shape, "bfloat16"), w, x.shape, padding=1)
    assert dx.dtype == np.float64 and dx.shape == x.shape


def test_signal_api_refuses_bfloat16_naming_the_argument():
    from cupyconv._signal.plan import plan_filter

    with pytest.raises(TypeError, match=r"in2 has dtype bfloat16.*SciPy has no bfloat16"):
        plan_filter((10,), (3,), np.float32, BF16, func="correlate")
    with pytest.raises(TypeError, match=r"in1 has dtype bfloat16"):
        plan_filter((10, 10), (3, 3), BF16, np.float32, func="correlate2d")


def test_tune_names_the_supported_dtypes():
    from cupyconv._dispatch.tune import tune

    with pytest.raises(TypeError, match="dtype must be one of float16, bfloat16, float32, float64"):
        tune((1, 2, 5, 5), (3, 2, 3, 3), dtype="int32")
