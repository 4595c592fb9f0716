"""The fused inference epilogue of ``conv`` (``act(conv + bias + z)``) without a GPU: the
activation table, its float64 reference math against hand-written formulas, the reference
convolution's epilogue, and the argument checks (which run before anything is compiled)."""

import math
import re

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core import arrays
from cupyconv._core.activation import ACTIVATIONS, activate_reference, activation_code
from cupyconv._core.kernel_module import KERNEL_CONSTANTS, load_source

V = np.array([-20.0, -6.5, -3.0, -1.0, -0.25, -0.0, 0.0, 0.3, 1.0, 2.5, 5.999, 6.0, 7.5, 30.0])


def test_relu_and_relu6_clip():
    np.testing.assert_array_equal(activate_reference(V, "relu"), [max(v, 0.0) for v in V])
    np.testing.assert_array_equal(activate_reference(V, "relu6"),
                                  [min(max(v, 0.0), 6.0) for v in V])


def test_relu_passes_nan_through():
    for name in ("relu", "relu6"):
        assert math.isnan(activate_reference(np.array([np.nan]), name)[0])


def test_silu_and_its_alias():
    want = [v / (1.0 + math.exp(-v)) for v in V]
    np.testing.assert_allclose(activate_reference(V, "silu"), want, rtol=1e-15, atol=1e-300)
    np.testing.assert_array_equal(activate_reference(V, "swish"), activate_reference(V, "silu"))
    # no overflow warning or NaN far out on either side
    with np.errstate(over="raise"):
        out = activate_reference(np.array([-1000.0, 1000.0]), "silu")
    np.testing.assert_array_equal(out, [-0.0, 1000.0])


def test_gelu_is_the_exact_erf_form():
    want = [0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in V]
    np.testing.assert_allclose(activate_reference(V, "gelu"), want, rtol=1e-15, atol=1e-300)


def test_gelu_tanh():
    c = math.sqrt(2.0 / math.pi)
    want = [0.5 * v * (1.0 + math.tanh(c * (v + 0.044715 * v ** 3))) for v in V]
    np.testing.assert_allclose(activate_reference(V, "gelu_tanh"), want, rtol=1e-14, atol=1e-300)
    # the kernels' form of it, a sigmoid of 2u, is the same function (and free of the tanh
    # form's cancellation in 1 + tanh(u) far on the negative side)
    sig = [v / (1.0 + math.exp(-2.0 * c * (v + 0.044715 * v ** 3))) for v in V]
    np.testing.assert_allclose(want, sig, rtol=1e-13, atol=1e-12)


def test_no_activation_is_the_identity():
    np.testing.assert_array_equal(activate_reference(V, None), V)


@pytest.mark.parametrize("bad", ["tanh", "ReLU", "", 1, ["relu"], True])
def test_bad_activation_is_named(bad):
    with pytest.raises(ValueError, match=r"activation must be one of \(None, 'relu', 'relu6', "
                                         r"'silu', 'swish', 'gelu', 'gelu_tanh'\), got"):
        activation_code(bad)


def test_codes_are_the_kernel_constants():
    """The names map onto every CC_ACT_* constant, and the kernels' switch uses each of them."""
    consts = {k: v for k, v in KERNEL_CONSTANTS.items() if k.startswith("CC_ACT_")}
    assert set(ACTIVATIONS.values()) == set(consts.values())
    assert len(set(consts.values())) == len(consts)
    header = load_source("gemm/epilogue.cuh")
    for name in consts:
        assert re.search(rf"\b{name}\b", header), name


def test_separable_activations_share_the_codes():
    from cupyconv._depthwise.separable import ACTIVATIONS as SEPARABLE

    assert all(ACTIVATIONS[name] == code for name, code in SEPARABLE.items())


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("activation", [None, "relu6", "gelu"])
def test_reference_epilogue_order(layout, activation):
    """act(conv + bias + z), z in the output's layout."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (2, 3, 6, 5))
    w = rng.uniform(-1, 1, (4, 3, 3, 3))
    b = rng.uniform(-1, 1, 4)
    if layout == "NHWC":
        x, w = np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1)
    plain = reference.conv(x, w, b, padding=1, layout=layout)
    z = rng.uniform(-3, 3, plain.shape)
    got = reference.conv(x, w, b, padding=1, layout=layout, activation=activation, z=z)
    np.testing.assert_allclose(got, activate_reference(plain + z, activation), rtol=1e-15)


def test_reference_checks_z_shape():
    x, w = np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))
    with pytest.raises(ValueError, match=r"z must have shape \(1, 3, 3, 3\)"):
        reference.conv(x, w, z=np.ones((1, 3, 5, 5)))


def test_bad_activation_comes_before_the_operands():
    # (no GPU needed: the activation is checked before any array is looked at)
    with pytest.raises(ValueError, match="activation must be one of"):
        cupyconv.conv(None, None, activation="tanh")
    with pytest.raises(ValueError, match="activation must be one of"):
        cupyconv.conv2d(None, None, activation="leaky_relu")


class TestResidualCheck:
    """check_residual's rules, run on NumPy arrays standing in for CuPy ones (the check itself
    touches no device)."""

    @pytest.fixture(autouse=True)
    def _numpy_as_cupy(self, monkeypatch):
        class FakeCupy:
            ndarray = np.ndarray

        monkeypatch.setattr(arrays, "_cupy", lambda: FakeCupy)

    def test_accepts_any_strides(self):
        base = np.zeros((2, 5, 7, 3), np.float32)
        z = base.transpose(0, 3, 1, 2)  # a channels-last buffer seen as NCHW
        assert arrays.check_residual(z, (2, 3, 5, 7), "float32", "NCHW") is z
        assert arrays.check_residual(None, (2, 3, 5, 7), "float32", "NCHW") is None

    def test_shape_names_z_and_the_layout(self):
        with pytest.raises(ValueError, match=r"z must have the output's shape \(2, 5, 7, 3\) "
                                             r"\(layout NHWC\), got \(2, 3, 5, 7\)"):
            arrays.check_residual(np.zeros((2, 3, 5, 7), np.float32), (2, 5, 7, 3), "float32",
                                  "NHWC")

    def test_dtype_names_z(self):
        with pytest.raises(TypeError, match="z has dtype float64 but the output has dtype float32"):
            arrays.check_residual(np.zeros((1, 2), np.float64), (1, 2), "float32", "NCHW")

    def test_not_an_array(self):
        with pytest.raises(TypeError, match="z must be a cupy.ndarray"):
            arrays.check_residual([[0.0, 1.0]], (1, 2), "float32", "NCHW")
