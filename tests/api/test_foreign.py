"""CPU checks of other libraries' GPU arrays on the warm path (issue 47 item 1,
cupyconv._core.foreign and cupyconv._dispatch.callcache.call_key): a foreign array is described
once, without a CuPy view, into the key entry a CuPy array of the same layout has (PyTorch
tensors: a tagged entry of their own attributes), and handed to the prepared call as its device
pointer; the full path's view comes from the same description; everything the full path refuses
gets no key and keeps its message.

CuPy's array objects are made here over made-up pointers (no device memory is touched); the
device lookups CuPy would ask the driver for are replaced, and PyTorch is a stand-in module."""

import math
import sys
import types

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cupyconv  # noqa: E402
from cupyconv._core import arrays, foreign  # noqa: E402
from cupyconv._core.arrays import check_out_disjoint, memory_bounds  # noqa: E402
from cupyconv._dispatch import callcache  # noqa: E402
from cupyconv._dispatch.callcache import PreparedCall, call_key  # noqa: E402

OPTIONS = (None, 1, 1, 1, 1, "NCHW", "auto")
BASE = 1 << 32


class CAI:
    """An array of another library, as far as ``__cuda_array_interface__`` goes; counts reads."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None, **extra):
        self.desc = dict(shape=tuple(shape), typestr=typestr, data=(ptr, False), strides=strides,
                         version=3, **extra)
        self.reads = 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return dict(self.desc)


class RequiresGrad:
    """PyTorch's tensors that require grad: both protocols refuse (their messages)."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")


class CpuTensor:
    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    def __array__(self, dtype=None, copy=None):  # pragma: no cover - never converted
        raise AssertionError("a CPU tensor must not be copied to the GPU")

    def __dlpack_device__(self):
        return (1, 0)


@pytest.fixture
def driver(monkeypatch):
    """The device queries CuPy makes while viewing an interface: the device of a pointer (0,
    or 1 from BASE * 8 on), the current device (0), stream synchronizations (recorded); and
    cupy.from_dlpack asks the producer for its capsule (which the fakes here refuse)."""
    real = cupy.cuda.UnownedMemory
    seen = types.SimpleNamespace(synced=[], lookups=0)

    def unowned(ptr, size, owner, device_id=-1):
        if device_id < 0:
            seen.lookups += 1
            device_id = 1 if ptr >= BASE * 8 else 0
        return real(ptr, size, owner, device_id)

    monkeypatch.setattr(cupy.cuda, "UnownedMemory", unowned)
    monkeypatch.setattr(cupy.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cupy.cuda.runtime, "streamSynchronize", seen.synced.append)
    monkeypatch.setattr(cupy, "from_dlpack", lambda a: a.__dlpack__(stream=1) and pytest.fail())
    callcache.clear()
    yield seen
    callcache.clear()


def cupy_array(ptr, shape, dtype="float32", strides=None, device=0):
    """A cupy.ndarray header over ``ptr`` (no memory behind it)."""
    dtype = np.dtype(dtype)
    memory = cupy.cuda.UnownedMemory(ptr, math.prod(shape) * dtype.itemsize * 4, None, device)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


def key(*arrays, options=OPTIONS):
    return call_key("conv", arrays, options)[0]


# ------------------------------------------------------------------------- the interface path
def test_an_interface_array_has_the_key_of_a_cupy_array_of_its_layout(driver):
    shape = (2, 3, 5, 7)
    a = CAI(BASE, shape)
    assert key(a, None) == key(cupy_array(2 * BASE, shape), None)
    assert a.reads == 1  # one read of the interface per key
    # strides spelled out (C order) are the same layout as strides None
    assert key(CAI(BASE, shape, strides=(420, 140, 28, 4)), None) == key(a, None)


@pytest.mark.parametrize("change", [
    dict(strides=(4, 8, 24, 120)),         # Fortran order
    dict(strides=(420, 140, 28, -4)),      # a reversed last axis
    dict(typestr="<f8"),
    dict(typestr="<f2"),
    dict(ptr=BASE + 8),                    # 8-byte aligned, not 16
    dict(ptr=BASE * 8),                    # another device
    dict(shape=(2, 3, 7, 5)),
])
def test_any_other_layout_has_another_key(driver, change):
    base = dict(ptr=BASE, shape=(2, 3, 5, 7))
    assert key(CAI(**{**base, **change}), None) != key(CAI(**base), None)


def test_only_the_alignment_of_the_pointer_is_keyed(driver):
    assert key(CAI(BASE + 16 * 5, (4, 4))) == key(CAI(BASE, (4, 4)))
    assert key(CAI(BASE + 4, (4, 4))) != key(CAI(BASE, (4, 4)))


def test_the_operand_is_the_pointer_and_the_view_the_full_paths(driver):
    shape, strides = (2, 3, 4), (4, 8, 24)  # a transposed view: not contiguous
    a = CAI(BASE + 32, shape, strides=strides)
    _, (op, none) = call_key("conv", (a, None), OPTIONS)
    assert none is None and isinstance(op, foreign.ForeignArray) and op.source is a
    assert op.data.ptr == op.ptr == BASE + 32
    view = op.cupy()
    assert type(view) is cupy.ndarray and view.data.ptr == BASE + 32
    assert (view.shape, view.strides, view.dtype, view.data.device_id) == (
        shape, strides, np.dtype("float32"), 0)
    assert memory_bounds(op) == memory_bounds(view)
    assert (op.size, op.itemsize) == (view.size, view.itemsize)
    # the full path's view (require_array) is made from the same description
    full = arrays.require_array(a, "x")
    assert (full.data.ptr, full.shape, full.strides, full.dtype) == (
        view.data.ptr, view.shape, view.strides, view.dtype)


def test_a_contiguous_interface_view_has_c_strides(driver):
    view = arrays.require_array(CAI(BASE, (2, 1, 3), typestr="<c8"), "x")
    assert view.strides == (24, 24, 8) and view.flags.c_contiguous
    assert view.strides == foreign.c_strides((2, 1, 3), 8)


def test_the_device_is_the_pointers_and_the_current_one_for_an_empty_array(driver):
    assert key(CAI(BASE * 8, (4,)))[1][3] == 1
    lookups = driver.lookups
    assert key(CAI(0, (0, 4)))[1][3] == 0  # empty: pointer 0, no lookup
    assert driver.lookups == lookups


def test_a_version_3_stream_is_synchronized_as_cupy_does(driver, monkeypatch):
    key(CAI(BASE, (4,), stream=None))
    assert driver.synced == []
    key(CAI(BASE, (4,), stream=77))
    assert driver.synced == [77]
    from cupy import _util

    monkeypatch.setattr(_util, "CUDA_ARRAY_INTERFACE_SYNC", False)
    key(CAI(BASE, (4,), stream=78))
    assert driver.synced == [77]


@pytest.mark.parametrize("make", [
    lambda: RequiresGrad(), lambda: CpuTensor(), lambda: np.ones((2, 3), np.float32),
    lambda: [1.0, 2.0], lambda: CAI(BASE, (2, 3), mask=object()),
    lambda: CAI(BASE, (2, 3), typestr=">f4"),
], ids=["requires-grad", "cpu-tensor", "numpy", "list", "masked", "big-endian"])
def test_what_the_full_path_refuses_gets_no_key(driver, make, monkeypatch):
    monkeypatch.setattr(cupy, "asarray", lambda a: (_ for _ in ()).throw(ValueError("refused")))
    args = (make(), None)
    assert call_key("conv", args, OPTIONS) == (None, args)


def test_refusals_keep_their_messages(driver):
    with pytest.raises(TypeError, match=r"^x \(.*RequiresGrad\) offers a GPU array protocol but "
                                        r"could not be viewed .*use tensor.detach\(\)$"):
        cupyconv.conv(RequiresGrad(), RequiresGrad())
    with pytest.raises(TypeError, match=r"^w must be a cupy.ndarray .*; move it to the GPU first: "
                                        r"w = cupy.asarray\(w\)$"):
        cupyconv.conv(CAI(BASE, (1, 2, 5, 5)), CpuTensor())
    with pytest.raises(TypeError, match=r"x must be a cupy.ndarray.*cupy.asarray\(x\)"):
        cupyconv.conv(np.ones((1, 2, 5, 5), np.float32), CAI(BASE, (3, 2, 3, 3)))


def test_a_void_interface_goes_through_dlpack(driver, monkeypatch):
    """PyTorch spells bfloat16 "<V2" in its interface: DLPack says what the type is."""
    seen = []
    bf16 = cupy_array(BASE, (2, 3), ml_dtypes.bfloat16)
    monkeypatch.setattr(cupy, "from_dlpack", lambda a: seen.append(a) or bf16)

    class Bf16(CAI):
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):  # pragma: no cover - from_dlpack is replaced
            raise AssertionError

    a = Bf16(BASE, (2, 3), typestr="<V2")
    k, (op,) = call_key("conv", (a,), OPTIONS)
    assert op is bf16 and seen == [a]
    assert k == key(bf16)
    assert arrays.require_array(a, "x") is bf16
    # without DLPack, what CuPy makes of the interface (a void array, refused by dtype later)
    monkeypatch.setattr(cupy, "asarray", lambda a: "void view")
    assert arrays.require_array(CAI(BASE, (2, 3), typestr="<V2"), "x") == "void view"


# ---------------------------------------------------------------------- the prepared call
def test_a_prepared_call_replays_foreign_pointers_and_returns_a_cupy_out(driver):
    x, w, out = CAI(BASE, (1, 2, 5, 5)), CAI(BASE + 4096, (3, 2, 3, 3)), CAI(BASE * 2, (1, 3, 3, 3))
    _, ops = call_key("conv", (x, w, None, None, out), OPTIONS)
    replayed = []
    call = PreparedCall(replayed.append, (1, 3, 3, 3), np.dtype("float32"), 0,
                        ("x", "w", "bias", "z"), recorded=True)
    y = call(ops[:-1], ops[-1])
    (operands,) = replayed
    assert [None if o is None else o.data.ptr for o in operands] == [
        BASE, BASE + 4096, None, None, BASE * 2]
    assert type(y) is cupy.ndarray and y is operands[-1] and y.data.ptr == BASE * 2
    assert y.shape == (1, 3, 3, 3) and y.flags.c_contiguous


def test_a_foreign_out_that_overlaps_an_input_is_refused(driver):
    x = CAI(BASE, (1, 2, 5, 5))
    out = CAI(BASE + 40, (1, 3, 3, 3))  # inside x's bytes
    _, ops = call_key("conv", (x, CAI(BASE * 2, (3, 2, 3, 3)), None, None, out), OPTIONS)
    call = PreparedCall(lambda operands: pytest.fail("replayed"), (1, 3, 3, 3),
                        np.dtype("float32"), 0, ("x", "w", "bias", "z"), recorded=True)
    with pytest.raises(ValueError, match=r"^out overlaps x in memory \(x is read while out is "
                                         r"written\): pass a separate output array, or out=None$"):
        call(ops[:-1], ops[-1])
    # the same answer as for the CuPy views of the same memory
    with pytest.raises(ValueError, match="out overlaps x"):
        check_out_disjoint(ops[-1].cupy(), {"x": ops[0].cupy()})


def test_a_call_that_was_not_recorded_runs_on_cupy_views(driver):
    x = CAI(BASE, (1, 2, 5, 5))
    _, ops = call_key("conv", (x, cupy_array(2 * BASE, (3, 2, 3, 3)), None, None, None), OPTIONS)
    seen = []
    call = PreparedCall(seen.append, (1, 3, 3, 3), np.dtype("float32"), 0,
                        ("x", "w", "bias", "z"), recorded=False)
    call._empty = lambda shape, dtype: cupy_array(BASE * 3, shape, dtype)
    call(ops[:-1], None)
    assert all(o is None or type(o) is cupy.ndarray for o in seen[0])
    assert seen[0][0].data.ptr == BASE


def test_conv_with_interface_arrays_takes_the_prepared_call_of_cupy_arrays(driver):
    """End to end through cupyconv.conv: a call with interface arrays finds the prepared call
    remembered for CuPy arrays of the same layout and replays it with its own pointers."""
    shapes = ((1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 5, 5))
    options = (None, 1, 1, 1, 1, "NCHW", "auto", None, "", "exact")
    cupy_key, _ = call_key("conv", (*[cupy_array(BASE * (9 + i), s) for i, s in
                                      enumerate(shapes[:2])], None, None,
                                    cupy_array(BASE * 11, shapes[2])), options)
    replayed = []
    callcache.remember(cupy_key, PreparedCall(replayed.append, shapes[2], np.dtype("float32"), 0,
                                              ("x", "w", "bias", "z"), recorded=True))
    x, w, out = (CAI(BASE * (1 + i), s) for i, s in enumerate(shapes))
    y = cupyconv.conv(x, w, padding=1, out=out, precision="exact")
    assert [o if o is None else o.data.ptr for o in replayed[0]] == [
        BASE, BASE * 2, None, None, BASE * 3]
    assert type(y) is cupy.ndarray and y.data.ptr == BASE * 3


# ---------------------------------------------------------------------------------- PyTorch
class _Dtype:
    def __init__(self, name):
        self.name = name


@pytest.fixture
def torch(monkeypatch, driver):
    """A stand-in ``torch`` module: its Tensor has the attributes cupyconv reads (C calls in
    PyTorch) and PyTorch's protocol behaviour; ``streams`` holds PyTorch's current stream per
    device."""
    module = types.ModuleType("torch")
    for name in ("float16", "float32", "float64", "bfloat16", "complex64", "int32"):
        setattr(module, name, _Dtype(name))
    streams = {0: 0}
    module._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: streams[d])
    module.streams, module.interface_reads = streams, 0

    class Tensor:
        def __init__(self, ptr, shape, dtype="float32", strides=None, requires_grad=False,
                     device=0):
            self.ptr, self.shape, self._device = ptr, tuple(shape), device
            self.dtype = getattr(module, dtype)
            self.itemsize = 2 if dtype in ("float16", "bfloat16") else 4
            self.strides = strides or foreign.c_strides(self.shape, 1)  # (in elements)
            self.is_cuda, self.requires_grad = device >= 0, requires_grad

        def get_device(self):
            return self._device

        def data_ptr(self):
            return self.ptr

        def stride(self):
            return self.strides

        def is_contiguous(self):
            return self.strides == foreign.c_strides(self.shape, 1)

        def permute(self, *dims):
            return Tensor(self.ptr, [self.shape[d] for d in dims], self.dtype.name,
                          tuple(self.strides[d] for d in dims), self.requires_grad, self._device)

        @property
        def __cuda_array_interface__(self):  # PyTorch's, read only where described otherwise
            module.interface_reads += 1
            if self.requires_grad:
                raise RuntimeError("Can't get __cuda_array_interface__ on Variable that "
                                   "requires grad.")
            typestr = {"bfloat16": "<V2", "float16": "<f2"}.get(self.dtype.name, "<f4")
            strides = (None if self.is_contiguous()
                       else tuple(s * self.itemsize for s in self.strides))
            return dict(typestr=typestr, shape=self.shape, strides=strides,
                        data=(self.ptr, False), version=2)

        def __array__(self, dtype=None, copy=None):  # pragma: no cover - never converted
            raise AssertionError("a tensor must not be copied to or from the host")

        def __dlpack_device__(self):
            return (2, self._device)

        def __dlpack__(self, stream=None):
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")

    Tensor.__module__, Tensor.__qualname__ = "torch", "Tensor"
    module.Tensor = Tensor
    monkeypatch.setitem(sys.modules, "torch", module)
    monkeypatch.setattr(cupy.cuda, "get_current_stream",
                        lambda device=-1: types.SimpleNamespace(ptr=0))
    for name, value in (("_Tensor", None), ("_torch_dtypes", {}), ("_torch_raw_stream", None),
                        ("_bfloat16", None)):
        monkeypatch.setattr(foreign, name, value)
    return module


def test_a_tensor_is_keyed_by_its_own_attributes(torch):
    t = torch.Tensor(BASE, (2, 3, 5, 7))
    k, (op,) = call_key("conv", (t,), OPTIONS)
    assert torch.interface_reads == 0  # (PyTorch's interface is a Python property)
    assert op.source is t and op.data.ptr == BASE
    assert k[1] == ("torch", (2, 3, 5, 7), (105, 35, 7, 1), np.dtype("float32"), 0, 0)
    # (element strides: never equal to the entry of a CuPy array, whose strides count bytes)
    assert k != key(cupy_array(BASE, (2, 3, 5, 7)))
    assert op.strides == (420, 140, 28, 4) and memory_bounds(op) == (BASE, BASE + 840)
    for other in (torch.Tensor(BASE + 8, (2, 3, 5, 7)), torch.Tensor(BASE, (2, 3, 5, 7), "float16"),
                  torch.Tensor(BASE, (2, 3, 5, 7)).permute(0, 2, 3, 1),
                  torch.Tensor(BASE, (2, 3, 5, 7), device=1)):
        assert key(other) != k
    assert key(torch.Tensor(BASE + 64, (2, 3, 5, 7))) == k


@pytest.mark.parametrize("memory,strides", [
    ("channels_last", (384, 64, 8, 2)),    # NHWC memory: the permuted view is C-contiguous
    ("contiguous", (384, 16, 2, 96)),      # NCHW memory permuted: read through its strides
])
def test_a_tensor_view_is_the_one_pytorchs_interface_gives(torch, memory, strides):
    if memory == "channels_last":  # what memory_format=torch.channels_last gives
        nchw = torch.Tensor(BASE, (2, 6, 8, 4), "float16").permute(0, 3, 1, 2)
    else:
        nchw = torch.Tensor(BASE, (2, 4, 6, 8), "float16")
    t = nchw.permute(0, 2, 3, 1)
    (op,) = call_key("conv", (t,), OPTIONS)[1]
    view = arrays.require_array(t, "x")
    assert (view.data.ptr, view.shape, view.strides, view.dtype) == (
        BASE, (2, 6, 8, 4), strides, np.dtype("float16"))
    assert view.flags.c_contiguous == (memory == "channels_last")
    assert op.cupy().strides == view.strides and memory_bounds(op) == memory_bounds(view)
    # what cupy.asarray makes of PyTorch's interface
    desc = t.__cuda_array_interface__
    assert (desc["strides"] or foreign.c_strides(desc["shape"], 2)) == view.strides


def test_a_tensor_that_requires_grad_keeps_pytorchs_refusal(torch):
    t = torch.Tensor(BASE, (1, 2, 5, 5), requires_grad=True)
    assert call_key("conv", (t,), OPTIONS)[0] is None
    with pytest.raises(TypeError, match=r"^x \(torch.Tensor\) offers a GPU array protocol but "
                                        r"could not be viewed .*use tensor.detach\(\)$"):
        cupyconv.conv(t, torch.Tensor(BASE, (3, 2, 3, 3)))


def test_a_cpu_tensor_keeps_its_refusal(torch):
    class CpuTorchTensor(torch.Tensor):  # (PyTorch raises AttributeError for a CPU tensor)
        __cuda_array_interface__ = property(lambda self: (_ for _ in ()).throw(
            AttributeError("non-CUDA tensor")))

        def __dlpack_device__(self):
            return (1, 0)

    t = CpuTorchTensor(BASE, (1, 2, 5, 5), device=-1)
    assert call_key("conv", (t,), OPTIONS)[0] is None
    with pytest.raises(TypeError, match=r"x must be a cupy.ndarray.*cupy.asarray\(x\)"):
        arrays.require_array(t, "x")


def test_bfloat16_tensors_follow_dlpacks_stream_rule(torch, monkeypatch):
    """PyTorch's interface spells bfloat16 "<V2": bfloat16 tensors went through DLPack, which
    orders PyTorch's current stream before CuPy's.  On one stream there is nothing to order
    and the tensor is described; on two, cupy.from_dlpack converts it (and orders)."""
    t = torch.Tensor(BASE, (2, 3), "bfloat16")
    k, (op,) = call_key("conv", (t,), OPTIONS)
    assert isinstance(op, foreign.ForeignArray) and k[1][3] == np.dtype(ml_dtypes.bfloat16)
    assert op.cupy().dtype == np.dtype(ml_dtypes.bfloat16)

    converted = cupy_array(BASE, (2, 3), ml_dtypes.bfloat16)
    monkeypatch.setattr(cupy, "from_dlpack", lambda a: converted)
    torch.streams[0] = 12345  # PyTorch on a side stream, CuPy on its default one
    k2, (op2,) = call_key("conv", (t,), OPTIONS)
    assert op2 is converted and k2 == key(converted)
    assert arrays.require_array(t, "x") is converted


def test_overlap_rule_on_cupy_and_foreign_arrays(driver):
    """check_out_disjoint by address ranges: an empty array overlaps nothing, interleaved views
    of one buffer overlap, and a foreign array answers as its CuPy view does."""
    buf = (4, 6)
    even = cupy_array(BASE, (4, 3), strides=(24, 8))        # columns 0, 2, 4 of a 4x6 float32
    odd = cupy_array(BASE + 4, (4, 3), strides=(24, 8))     # columns 1, 3, 5
    with pytest.raises(ValueError, match="out overlaps x"):
        check_out_disjoint(odd, {"x": even})
    check_out_disjoint(cupy_array(BASE + 24 * 4, buf), {"x": even})      # just past it
    check_out_disjoint(cupy_array(BASE, (0, 6)), {"x": even})             # empty out
    check_out_disjoint(odd, {"x": cupy_array(BASE, (4, 0)), "w": None})  # empty input
    foreign_odd = call_key("conv", (CAI(BASE + 4, (4, 3), strides=(24, 8)),), OPTIONS)[1][0]
    assert memory_bounds(foreign_odd) == memory_bounds(odd)
    with pytest.raises(ValueError, match="out overlaps x"):
        check_out_disjoint(foreign_odd, {"x": even})


def test_flat_tuples_of_plain_options_key_as_they_are_yet_apart_from_bools():
    """Per-dim options (stride=(1, 1)) skip the typed freeze, but (True, 1) is no (1, 1): it
    takes the typed key, and neither form can equal a key of plain options."""
    flat = callcache._with_options(["conv"], (2, (1, 1), (0, 0), "NCHW"))
    assert flat == callcache._with_options(["conv"], (2, (1, 1), (0, 0), "NCHW"))
    typed = callcache._with_options(["conv"], (2, (True, 1), (0, 0), "NCHW"))
    assert flat != typed
    assert callcache._with_options(["conv"], (2, 1, 0, "NCHW")) != flat
    nested = callcache._with_options(["conv"], (2, ((1, 1),), "NCHW"))  # (not flat: typed)
    assert nested == ("conv", callcache._freeze((2, ((1, 1),), "NCHW")))


@pytest.mark.parametrize("shape,strides,want", [
    ((2, 3, 4), (48, 16, 4), True),
    ((2, 3, 4), (48, 4, 12), False),
    ((2, 1, 4), (16, 999, 4), True),     # a dim of one element: any stride
    ((2, 0, 4), (7, 7, 7), True),        # empty
    ((2, 3, 4), (-48, 16, 4), False),
])
def test_a_description_knows_whether_it_is_c_contiguous(shape, strides, want):
    a = foreign._InterfaceArray(BASE, None, (shape, strides, np.dtype("float32"), 0, 0))
    assert a.c_contiguous is want and foreign.is_c_contiguous(a) is want
    assert a.ndim == len(shape)


def test_a_description_passes_through_the_key_and_require_array(driver):
    """cupyconv.cudnn hands its operands' descriptions on: call_key keys them as the arrays
    they describe, and the full path views them."""
    src = CAI(BASE, (2, 3, 4))
    described = foreign.describe(src)
    assert key(described, None, None, None, None) == key(src, None, None, None, None)
    view = arrays.require_array(described, "x")
    assert isinstance(view, cupy.ndarray) and view.data.ptr == BASE and view.shape == (2, 3, 4)
    assert arrays.described_array(src, "x").key == described.key

