"""GPU arrays of other libraries (PyTorch, JAX, Numba, ...) as cupyconv reads them.

A foreign array reaches a public function in two ways: the full path views it as a
``cupy.ndarray`` (:func:`cupyconv._core.arrays.require_array`), and the warm path
(:func:`cupyconv._dispatch.callcache.call_key`) needs only its call-cache key entry (shape,
strides, dtype, device, 16-byte alignment) and its device pointer.  Both come from one
description, a :class:`ForeignArray`, so that a key always describes the view that the full
path validated for it.  :func:`describe` makes it without building a CuPy view:

- a PyTorch tensor (exactly ``torch.Tensor``) from the tensor's own attributes, a few C calls
  and no interface dict (reading ``__cuda_array_interface__``, a Python property, costs more
  than a warm call may add).  The facts are those of PyTorch's interface: pointer, shape,
  strides (omitted for a contiguous tensor, so its view has C strides), dtype, device.
  PyTorch's interface is version 2: it names no stream and nothing is synchronized, as with
  ``cupy.asarray``.  bfloat16 is the exception: PyTorch's interface spells it ``"<V2"``, which
  NumPy and CuPy read as a plain 2-byte void, so a bfloat16 tensor is taken as DLPack gives it
  (``cupy.from_dlpack`` hands PyTorch CuPy's current stream, and PyTorch orders its current
  stream before it).  Where the two streams are one, that ordering is empty and the tensor is
  described here; otherwise :func:`describe` declines and the caller converts it through
  ``cupy.from_dlpack``, which orders them;
- any other object with ``__cuda_array_interface__`` from one read of the dict, taken as
  ``cupy.asarray`` takes it: C strides where ``strides`` is None, the device of the pointer
  (the current device for an empty array), and a version-3 ``stream`` synchronized at once
  (unless ``CUPY_CUDA_ARRAY_INTERFACE_SYNC=0``).

Anything else (DLPack only; a void, masked or big-endian interface; a tensor that requires grad,
a CPU tensor) is not described: :func:`describe` returns None or raises the protocol's own
error, and the caller takes the conversion path of :func:`~cupyconv._core.arrays.gpu_view`,
whose errors are the ones users see.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.caches import register

_TORCH_TAG = "torch"   # first item of a tensor's key entry: its strides count elements
_Tensor = None         # torch.Tensor, once a tensor has been seen (torch is never imported here)
_torch_dtypes: dict = {}
_torch_raw_stream = None
_bfloat16 = None
_c_strides: dict = {}


def byte_bounds(ptr: int, shape, strides, itemsize: int) -> tuple[int, int]:
    """``[lo, hi)``: the byte addresses that the elements of an array at ``ptr`` with ``shape``
    and byte ``strides`` can occupy (negative strides too); ``lo == hi`` when it is empty."""
    if math.prod(shape) == 0:
        return ptr, ptr
    lo = hi = ptr
    for n, s in zip(shape, strides):
        if s > 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi + itemsize


class ForeignArray:
    """What a prepared call reads of a foreign array: ``ptr`` and ``key`` (its call-cache key
    entry), and for the checks of a call with ``out=`` ``shape``, ``strides`` (bytes),
    ``itemsize``, ``size`` and ``data.ptr``, as on a ``cupy.ndarray``.  :meth:`cupy` makes the
    view the full path would make of ``source``."""

    __slots__ = ("ptr", "source", "key")

    def __init__(self, ptr: int, source, key: tuple):
        self.ptr, self.source, self.key = ptr, source, key

    @property
    def data(self):  # (a.data.ptr, as the launch replay reads every operand)
        return self

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def c_contiguous(self) -> bool:
        """As ``flags.c_contiguous`` of the CuPy view: dims of one element may have any stride,
        an empty array is contiguous."""
        shape = tuple(self.shape)
        if 0 in shape:
            return True
        step = self.itemsize
        for n, s in zip(reversed(shape), reversed(self.strides)):
            if n != 1 and s != step:
                return False
            step *= n
        return True

    def memory_bounds(self) -> tuple[int, int]:
        """As :func:`cupyconv._core.arrays.memory_bounds` (for ``out=`` checks)."""
        return byte_bounds(self.ptr, self.shape, self.strides, self.itemsize)


class _TorchArray(ForeignArray):
    """A PyTorch tensor; key ``(_TORCH_TAG, shape, strides in elements, dtype, device,
    ptr & 15)``."""

    __slots__ = ()

    shape = property(lambda self: self.key[1])
    dtype = property(lambda self: self.key[3])
    device = property(lambda self: self.key[4])

    @property
    def strides(self) -> tuple:
        k = self.key[3].itemsize
        return tuple(s * k for s in self.key[2])

    def memory_bounds(self) -> tuple[int, int]:
        # (element strides; never empty: empty tensors are not described)
        _, shape, steps, dtype = self.key[:4]
        lo = hi = 0
        for n, s in zip(shape, steps):
            if s > 0:
                hi += (n - 1) * s
            else:
                lo += (n - 1) * s
        k = dtype.itemsize
        return self.ptr + lo * k, self.ptr + (hi + 1) * k

    def cupy(self):
        # as cupy.asarray reads PyTorch's interface: no strides for a contiguous tensor
        strides = None if self.source.is_contiguous() else self.strides
        return _view(self.ptr, self.shape, self.dtype, strides, self.source, self.device)


class _InterfaceArray(ForeignArray):
    """An object with ``__cuda_array_interface__``; key ``(shape, strides in bytes, dtype,
    device, ptr & 15)``, the entry of a CuPy array of the same layout.  ``given`` holds the
    interface's own strides (None: C-contiguous), ``memory`` the ``cupy.cuda.UnownedMemory``
    whose device lookup gave ``device``."""

    __slots__ = ("given", "memory")

    shape = property(lambda self: self.key[0])
    strides = property(lambda self: self.key[1])
    dtype = property(lambda self: self.key[2])
    device = property(lambda self: self.key[3])

    def cupy(self):
        import cupy

        return cupy.ndarray(self.shape, self.dtype, cupy.cuda.MemoryPointer(self.memory, 0),
                            self.given)


def _nbytes(shape, strides, itemsize: int) -> int:
    """The buffer size that ``cupy.asarray`` gives an interface's memory."""
    if strides is None:
        return math.prod(shape) * itemsize
    return max((abs(n * s) for n, s in zip(shape, strides)), default=0)


def _view(ptr, shape, dtype, strides, owner, device: int):
    import cupy

    memory = cupy.cuda.UnownedMemory(ptr, _nbytes(shape, strides, dtype.itemsize), owner, device)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


def is_c_contiguous(a) -> bool:
    """Whether ``a``, a CuPy array or a :class:`ForeignArray`, is C-contiguous."""
    return a.c_contiguous if isinstance(a, ForeignArray) else a.flags.c_contiguous


def c_strides(shape: tuple, itemsize: int) -> tuple:
    """Byte strides of a C-contiguous array (NumPy's and CuPy's: every dim, size 1 too)."""
    key = (shape, itemsize)
    strides = _c_strides.get(key)
    if strides is None:
        out, step = [], itemsize
        for n in reversed(shape):
            out.append(step)
            step *= max(n, 1)
        if len(_c_strides) >= 4096:
            _c_strides.clear()
        strides = _c_strides[key] = tuple(reversed(out))
    return strides


register(_c_strides.clear)


# ------------------------------------------------------------------------------------ PyTorch
def _is_torch_tensor_class(cls) -> bool:
    """Whether ``cls`` is exactly ``torch.Tensor`` (subclasses, Parameters included, take the
    interface path: their protocol methods may be overridden); sets up :data:`_Tensor` the
    first time."""
    if cls.__name__ != "Tensor" or cls.__module__ != "torch":
        return False
    import torch

    _torch_setup(torch)
    return cls is torch.Tensor


def _torch_setup(torch) -> None:
    """The dtypes PyTorch's ``__cuda_array_interface__`` names, as CuPy views them; bfloat16
    as ``cupy.from_dlpack`` views it; PyTorch's current-stream lookup."""
    global _Tensor, _torch_raw_stream, _bfloat16
    names = ("float16", "float32", "float64", "complex64", "complex128", "bool", "int8",
             "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
    dtypes = {getattr(torch, n): np.dtype(n) for n in names if hasattr(torch, n)}
    try:
        import ml_dtypes

        _bfloat16 = dtypes[torch.bfloat16] = np.dtype(ml_dtypes.bfloat16)
    except ImportError:  # pragma: no cover - a dependency; bfloat16 then takes the DLPack path
        pass
    _torch_dtypes.update(dtypes)
    # (private, but what PyTorch's own generated code calls; without it bfloat16 converts)
    _torch_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _Tensor = torch.Tensor


def _streams_agree(device: int) -> bool:
    """Whether PyTorch's and CuPy's current streams on ``device`` are one stream: DLPack's
    ordering of the first before the second is then empty."""
    if _torch_raw_stream is None:
        return False
    import cupy

    return _torch_raw_stream(device) == cupy.cuda.get_current_stream(device).ptr


def _describe_tensor(t) -> _TorchArray | None:
    try:
        if not t.is_cuda or t.requires_grad:  # the interface refuses these: the caller says why
            return None
        dtype = _torch_dtypes.get(t.dtype)
        shape = t.shape
        if dtype is None or 0 in shape:  # (an empty tensor's interface pointer is 0)
            return None
        device = t.get_device()
        if dtype is _bfloat16 and not _streams_agree(device):
            return None
        ptr = t.data_ptr()
        return _TorchArray(ptr, t, (_TORCH_TAG, shape, t.stride(), dtype, device, ptr & 15))
    except Exception:  # a tensor without strides (sparse, ...): the protocols decide
        return None


# ------------------------------------------------------------------- __cuda_array_interface__
def _describe_interface(a) -> _InterfaceArray | None:
    import cupy

    desc = a.__cuda_array_interface__
    shape, dtype = desc["shape"], np.dtype(desc["typestr"])
    if (type(shape) is not tuple or dtype.type is np.void or dtype.byteorder == ">"
            or desc.get("mask") is not None):
        return None  # bfloat16 as "<V2" (DLPack says what it is), or what CuPy refuses
    given = desc.get("strides")
    if given is not None:
        given = tuple(given)
        if len(given) != len(shape):
            return None
    ptr = desc["data"][0]
    nbytes = _nbytes(shape, given, dtype.itemsize)
    if nbytes == 0:  # the pointer may be 0: CuPy takes the current device
        memory = cupy.cuda.UnownedMemory(ptr, 0, a, cupy.cuda.runtime.getDevice())
    else:  # CuPy's lookup of the pointer's device
        memory = cupy.cuda.UnownedMemory(ptr, nbytes, a)
    stream = desc.get("stream")
    if stream is not None and _sync_on_stream():
        cupy.cuda.runtime.streamSynchronize(stream)
    strides = c_strides(shape, dtype.itemsize) if given is None else given
    f = _InterfaceArray(ptr, a, (shape, strides, dtype, memory.device_id, ptr & 15))
    f.given, f.memory = given, memory
    return f


def _sync_on_stream() -> bool:
    """CuPy's setting: synchronize an interface's version-3 stream when viewing it."""
    from cupy import _util

    return bool(getattr(_util, "CUDA_ARRAY_INTERFACE_SYNC", True))


def describe(a) -> ForeignArray | None:
    """The :class:`ForeignArray` of ``a``, a GPU array of another library; None where ``a`` is
    not one that can be described without a conversion.  Raises what reading
    ``__cuda_array_interface__`` raises (AttributeError: a CPU tensor's property)."""
    cls = type(a)
    if cls is _Tensor or (_Tensor is None and _is_torch_tensor_class(cls)):
        described = _describe_tensor(a)
        if described is not None:
            return described
    if hasattr(cls, "__cuda_array_interface__") or "__cuda_array_interface__" in getattr(
            a, "__dict__", {}):
        return _describe_interface(a)
    return None
