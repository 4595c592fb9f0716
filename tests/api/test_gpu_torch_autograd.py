"""Issue 47 item 4: the "Use inside PyTorch" recipe (docs/pytorch.md, linked from README.md), run
as written (its ```python block, found and executed the way tests/test_readme.py runs every block), against
``torch.nn.functional.conv2d``'s autograd in float64: forward and both gradients in float64,
float32 and bfloat16, contiguous and channels-last; channels-last operands reach cupyconv at the
tensors' own addresses (no copy) as C-contiguous NHWC arrays; every cupyconv call runs on
PyTorch's current stream, a side stream included (autograd runs backward on its own thread); only
the gradients asked for are computed.  Skips where PyTorch, CUDA or a GPU is missing."""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import cupyconv  # noqa: E402
from cupyconv._core.verify import rel_error, tolerance  # noqa: E402

from test_readme import python_blocks  # noqa: E402

pytestmark = pytest.mark.gpu

RECIPE = "class CupyconvConv2d(torch.autograd.Function)"
RECIPE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "pytorch.md"
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
# (x shape, w shape, conv2d options): plain 3x3, and stride + asymmetric padding + dilation +
# groups (as per-dim tuples, which conv2d and cupyconv both take)
CASES = [((2, 8, 11, 10), (12, 8, 3, 3), dict(stride=1, padding=1, dilation=1, groups=1)),
         ((2, 8, 13, 12), (6, 4, 3, 3), dict(stride=2, padding=(1, 2), dilation=(1, 2),
                                              groups=2))]


@pytest.fixture(scope="module")
def recipe():
    """The namespace of the recipe block after running it (its own example included)."""
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    blocks = [(line, source) for line, source in python_blocks(RECIPE_PAGE.read_text())
              if RECIPE in source]
    assert len(blocks) == 1, "docs/pytorch.md must hold one block with the recipe"
    line, source = blocks[0]
    namespace = {"__name__": "readme_example"}
    exec(compile(source, f"docs/pytorch.md:{line}", "exec"), namespace)
    torch.cuda.synchronize()
    return namespace


@pytest.fixture
def calls(monkeypatch):
    """Every call of cc.conv / conv_backward_data / conv_backward_weight the recipe makes: the
    CuPy arrays it passed (address, C-contiguity), the result's address, the layout, and CuPy's
    and PyTorch's current streams at that moment."""
    import cupy

    seen = []

    def spying(name, original):
        def spy(*args, **kwargs):
            arrays = [a for a in args if isinstance(a, cupy.ndarray)]
            record = dict(name=name, layout=kwargs.get("layout"),
                          ptrs=[a.data.ptr for a in arrays],
                          c_contiguous=[a.flags.c_contiguous for a in arrays],
                          cupy_stream=cupy.cuda.get_current_stream().ptr,
                          torch_stream=torch.cuda.current_stream().cuda_stream)
            result = original(*args, **kwargs)
            record["out_ptr"] = result.data.ptr
            seen.append(record)
            return result
        return spy

    for name in ("conv", "conv_backward_data", "conv_backward_weight"):
        monkeypatch.setattr(cupyconv, name, spying(name, getattr(cupyconv, name)))
    return seen


def _tensor(shape, dtype, channels_last, seed, requires_grad=True):
    """Uniform(-1, 1) values rounded to ``dtype``, on the GPU, in the memory format asked for."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = (torch.rand(shape, device="cuda", dtype=torch.float64, generator=gen) * 2 - 1).to(dtype)
    if channels_last:
        t = t.contiguous(memory_format=torch.channels_last)
    return t.requires_grad_(requires_grad)


def _host(t):
    return t.detach().to(torch.float64).cpu().numpy()


def _reference(x, w, g, options):
    """conv2d's forward and autograd gradients in float64, on the values ``x``, ``w`` and the
    output gradient ``g`` hold."""
    x64 = x.detach().to(torch.float64).requires_grad_()
    w64 = w.detach().to(torch.float64).requires_grad_()
    y64 = torch.nn.functional.conv2d(x64, w64, **options)
    y64.backward(g.detach().to(torch.float64))
    return _host(y64), _host(x64.grad), _host(w64.grad)


def _check(dtype, ours, reference, what):
    got, want = _host(ours), reference
    err, tol = rel_error(got, want), tolerance(dtype, want)
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.2e} ({dtype})"


def _apply(recipe, x, w, options):
    o = options
    return recipe["CupyconvConv2d"].apply(x, w, o["stride"], o["padding"], o["dilation"],
                                          o["groups"])


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=["3x3", "strided-grouped"])
def test_recipe_matches_conv2d_autograd(recipe, calls, case, dtype, channels_last):
    xs, ws, options = case
    x = _tensor(xs, DTYPES[dtype], channels_last, 1)
    w = _tensor(ws, DTYPES[dtype], channels_last, 2)
    y = _apply(recipe, x, w, options)
    g = _tensor(tuple(y.shape), DTYPES[dtype], channels_last, 3, requires_grad=False)
    y.backward(g)
    torch.cuda.synchronize()

    y_ref, dx_ref, dw_ref = _reference(x, w, g, options)
    _check(dtype, y, y_ref, "forward")
    _check(dtype, x.grad, dx_ref, "gradient of x")
    _check(dtype, w.grad, dw_ref, "gradient of w")
    assert y.dtype == DTYPES[dtype] and x.grad.dtype == DTYPES[dtype]

    assert [c["name"] for c in calls] == ["conv", "conv_backward_data", "conv_backward_weight"]
    layout = "NHWC" if channels_last else "NCHW"
    forward, data, weight = calls
    # no copies: cupyconv reads x and w where the tensors hold them, as C-contiguous arrays
    # (channels-last: their NHWC views), and y is cupyconv's result itself
    assert forward["ptrs"] == [x.data_ptr(), w.data_ptr()]
    assert data["ptrs"][1] == w.data_ptr() and weight["ptrs"][0] == x.data_ptr()
    for call in calls:
        assert call["layout"] == layout and all(call["c_contiguous"]), call
    assert y.data_ptr() == forward["out_ptr"]
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    assert y.is_contiguous(memory_format=memory_format)


def test_recipe_runs_on_pytorchs_stream(recipe, calls):
    """On a side stream (backward then runs on autograd's thread, on the forward op's stream)
    every cupyconv call runs on that stream; an output gradient in the other memory format is
    taken too."""
    xs, ws, options = CASES[1]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = _tensor(xs, torch.float32, True, 4)
        w = _tensor(ws, torch.float32, True, 5)
        y = _apply(recipe, x, w, options)
        g = _tensor(tuple(y.shape), torch.float32, False, 6, requires_grad=False)
        y.backward(g)
    stream.synchronize()
    assert [c["name"] for c in calls] == ["conv", "conv_backward_data", "conv_backward_weight"]
    for call in calls:
        assert call["cupy_stream"] == call["torch_stream"] == stream.cuda_stream, call
    y_ref, dx_ref, dw_ref = _reference(x, w, g, options)
    _check("float32", y, y_ref, "forward")
    _check("float32", x.grad, dx_ref, "gradient of x")
    _check("float32", w.grad, dw_ref, "gradient of w")


def test_recipe_follows_the_default_stream(recipe, calls):
    xs, ws, options = CASES[0]
    x = _tensor(xs, torch.float32, False, 7)
    w = _tensor(ws, torch.float32, False, 8)
    _apply(recipe, x, w, options).square().sum().backward()
    torch.cuda.synchronize()
    assert len(calls) == 3
    for call in calls:
        assert call["cupy_stream"] == call["torch_stream"], call


@pytest.mark.parametrize("wanted", ["x", "w"])
def test_recipe_computes_only_the_gradients_asked_for(recipe, calls, wanted):
    xs, ws, options = CASES[1]
    x = _tensor(xs, torch.float32, True, 9, requires_grad=wanted == "x")
    w = _tensor(ws, torch.float32, True, 10, requires_grad=wanted == "w")
    y = _apply(recipe, x, w, options)
    g = _tensor(tuple(y.shape), torch.float32, True, 11, requires_grad=False)
    y.backward(g)
    torch.cuda.synchronize()
    expected = "conv_backward_data" if wanted == "x" else "conv_backward_weight"
    assert [c["name"] for c in calls] == ["conv", expected]
    _, dx_ref, dw_ref = _reference(x, w, g, options)
    if wanted == "x":
        assert w.grad is None
        _check("float32", x.grad, dx_ref, "gradient of x")
    else:
        assert x.grad is None
        _check("float32", w.grad, dw_ref, "gradient of w")


def test_the_readme_example_ran(recipe):
    """The block's own example: a channels-last float32 layer, mean(y**2) backpropagated."""
    x, w, y = recipe["x"], recipe["w"], recipe["y"]
    assert y.shape == (8, 32, 32, 32) and y.is_contiguous(memory_format=torch.channels_last)
    x64 = x.detach().to(torch.float64).requires_grad_()
    w64 = w.detach().to(torch.float64).requires_grad_()
    y64 = torch.nn.functional.conv2d(x64, w64, padding=1)
    y64.square().mean().backward()
    assert rel_error(_host(y), _host(y64)) <= tolerance("float32", None)
    assert rel_error(_host(x.grad), _host(x64.grad)) <= 2 * tolerance("float32", None)
    assert rel_error(_host(w.grad), _host(w64.grad)) <= 2 * tolerance("float32", None)
    assert np.isfinite(_host(w.grad)).all()
