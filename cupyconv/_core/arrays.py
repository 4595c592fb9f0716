"""Checks and views of the CuPy arrays handed to the public functions.

Every check here runs before any kernel is compiled or launched, and raises a ``TypeError`` or
``ValueError`` that names the argument and the rule.  The checks take cupyconv's names for the
arguments and spell them as the caller does where a message is built (:mod:`._core.names`).
CuPy is imported lazily so that ``import cupyconv`` works (and the pure-Python parts are usable)
where CuPy is not installed.
"""

from __future__ import annotations

import math

from cupyconv._core.caches import memoized
from cupyconv._core.dtypes import itemsize
from cupyconv._core.foreign import ForeignArray, byte_bounds, describe
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DTYPES
from cupyconv._core.names import arg


def _cupy():
    try:
        import cupy
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ImportError("cupyconv's GPU functions need CuPy: install cupyconv with the extra for "
                          "your platform, e.g. `pip install cupyconv[cuda13]`") from exc
    return cupy


# DLPack device types whose memory CuPy can view: CUDA, ROCm and CUDA managed memory.
_DLPACK_GPU_DEVICES = (2, 10, 13)


def _class_has(a, attr: str) -> bool:
    """Whether ``a`` offers ``attr`` without evaluating it: the array protocols are properties,
    and some raise when read (a PyTorch tensor that requires grad)."""
    return hasattr(type(a), attr) or attr in getattr(a, "__dict__", {})


def _dlpack_on_gpu(a) -> bool:
    if not _class_has(a, "__dlpack_device__"):
        return False
    try:
        device_type = int(a.__dlpack_device__()[0])
    except Exception:  # a broken protocol method: not something we can view
        return False
    return device_type in _DLPACK_GPU_DEVICES


def described_array(a, name: str):
    """``a`` as checks that read only its shape, strides, dtype and address take it, for a call
    that hands it on to a public function: a CuPy array as itself, another library's array
    that :func:`~cupyconv._core.foreign.describe` reads as its description (no CuPy view: the
    function it is handed to keys its warm path by the same description), anything else as
    :func:`require_array` gives it (or refuses it)."""
    if isinstance(a, _cupy().ndarray):  # (a subclass too, as require_array takes it)
        return a
    try:
        described = describe(a)
    except Exception:  # (require_array meets the same error, or takes DLPack, and says why)
        described = None
    return described if described is not None else require_array(a, name)


def gpu_view(a, name: str):
    """A CuPy view (no copy) of a GPU array of another library, or None where ``a`` is no such
    array.  A PyTorch tensor or an object with ``__cuda_array_interface__`` (Numba, JAX, ...)
    is viewed from its :func:`~cupyconv._core.foreign.describe` description, the one the
    call cache keys it by (as ``cupy.asarray`` views it, waiting on the producer's stream where
    the interface names one).  ``__dlpack__`` of a GPU array goes through ``cupy.from_dlpack``
    (which hands the producer CuPy's current stream to order against) where the interface is
    missing, fails, or names a type CuPy reads as a plain void (PyTorch's bfloat16, ``"<V2"``);
    an interface that DLPack cannot replace goes through ``cupy.asarray``.  NumPy arrays (which
    have ``__dlpack__`` on the CPU) and CPU tensors are not GPU arrays: None."""
    import numpy

    if isinstance(a, numpy.ndarray):
        return None
    cupy = _cupy()
    failure, interface = None, False
    # the interface first (Numba has nothing else); DLPack where it is missing or refuses
    try:
        # a CPU tensor's interface property raises AttributeError: never cupy.asarray, which
        # would copy it from the host (the NumPy path this function refuses)
        described = describe(a)
        if described is not None:
            return described.cupy()
        interface = _class_has(a, "__cuda_array_interface__")
    except AttributeError:
        pass
    except Exception as exc:
        failure = exc
    if _class_has(a, "__dlpack__") and _dlpack_on_gpu(a):
        try:
            return cupy.from_dlpack(a)
        except Exception as exc:
            failure = exc
    elif interface:  # readable but not described (e.g. masked): CuPy says what it makes of it
        try:
            return cupy.asarray(a)
        except Exception as exc:
            failure = exc
    if failure is not None:
        kind = f"{type(a).__module__}.{type(a).__name__}"
        raise TypeError(f"{arg(name)} ({kind}) offers a GPU array protocol but could not be viewed as "
                        f"a cupy.ndarray without a copy: {failure}") from failure
    return None


def require_array(a, name: str):
    """``a`` itself if it is a CuPy ndarray; a CuPy view (no copy) of a GPU array of another
    library (:func:`gpu_view`) or of its :class:`~cupyconv._core.foreign.ForeignArray`
    description; otherwise a TypeError that says how to fix the call."""
    cupy = _cupy()
    if isinstance(a, cupy.ndarray):
        return a
    if isinstance(a, ForeignArray):
        return a.cupy()
    view = gpu_view(a, name)
    if view is not None:
        return view
    kind = f"{type(a).__module__}.{type(a).__name__}"
    name = arg(name)
    hint = (f"move it to the GPU first: {name} = cupy.asarray({name})"
            if hasattr(a, "__array__") or isinstance(a, (list, tuple)) else "")
    raise TypeError(f"{name} must be a cupy.ndarray or a GPU array with __cuda_array_interface__ "
                    f"or __dlpack__, got {kind}" + (f"; {hint}" if hint else ""))


def require_float_dtype(a, name: str, dtype=None, first: str | None = None) -> str:
    """The dtype name of ``a``, which must be a supported float type equal to ``dtype`` if given
    (the dtype of the call's operand ``first``, named in the message; "the input" without it)."""
    got = a.dtype.name
    if dtype is not None and got == dtype:  # (dtype: checked on the call's first operand)
        return got
    name = arg(name)
    if got not in DTYPES:
        raise TypeError(f"{name} has dtype {got}; supported dtypes are {', '.join(DTYPES)} "
                        f"(cast with {name}.astype(cupy.float32))")
    if dtype is not None and got != dtype:
        which = "the input" if first is None else arg(first, "the input")
        raise TypeError(f"{name} has dtype {got} but {which} has dtype {dtype}: all operands of "
                        f"one convolution must share a dtype")
    return got


def is_unbatched(x, w) -> bool:
    """PyTorch's unbatched form: ``x`` is ``(C, *spatial)`` (or channels-last ``(*spatial, C)``),
    one dim fewer than the weight, where a batched ``x`` has as many dims as the weight."""
    return x.ndim == w.ndim - 1


def with_batch_axis(a, name: str):
    """``a`` (None, or an unbatched array) as a CuPy view with a leading batch axis of 1."""
    return None if a is None else require_array(a, name)[None]


def without_batch_axis(y, out):
    """The unbatched result of a call run on batch-1 views: ``out`` itself where it was given
    (as a CuPy array: the caller's object when it is one), else ``y`` without its batch axis."""
    return y[0] if out is None else require_array(out, "out")


def batched_shape(shape):
    """``(1, *shape)`` for an unbatched ``input_shape``/``output_shape`` argument; anything that
    is not a sequence is returned as is, for the geometry to report."""
    return (1, *shape) if isinstance(shape, (tuple, list)) else shape


def same_device(arrays: dict) -> None:
    devices = {arg(name): a.data.device_id for name, a in arrays.items() if a is not None}
    if len(set(devices.values())) > 1:
        raise ValueError(f"all arrays must be on one GPU, got devices {devices}")


def check_bias(bias, channels: int, dtype: str):
    if bias is None:
        return None
    bias = require_array(bias, "bias")
    require_float_dtype(bias, "bias", dtype, first="x")
    if bias.shape != (channels,):
        raise ValueError(f"{arg('bias')} must have shape ({channels},) (one value per output "
                         f"channel), got {bias.shape}")
    return bias


def check_residual(z, shape: tuple, dtype: str, layout: str):
    """The residual ``z`` of a fused epilogue (or None): a CuPy array of the output's shape and
    dtype, with any strides (the launch paths copy a non-contiguous one once, in a recorded
    kernel)."""
    if z is None:
        return None
    z = require_array(z, "z")
    got, name = z.dtype.name, arg("z")
    if got != dtype:
        raise TypeError(f"{name} has dtype {got} but the output has dtype {dtype}: the residual "
                        f"is added to the output in its own dtype (cast with "
                        f"{name}.astype(cupy.{dtype}))")
    if z.shape != tuple(shape):
        raise ValueError(f"{name} must have the output's shape {tuple(shape)} ({arg('layout')} "
                         f"{layout}), got {z.shape}")
    return z


def memory_bounds(a) -> tuple[int, int]:
    """``[lo, hi)``: the byte addresses that ``a``'s elements can occupy (negative strides
    too); ``lo == hi`` for an empty array."""
    if isinstance(a, ForeignArray):
        return a.memory_bounds()
    return byte_bounds(a.data.ptr, a.shape, a.strides, a.itemsize)


def check_out_disjoint(out, inputs: dict) -> None:
    """``out`` must not overlap any input: kernels read inputs while they write ``out`` (tiles of
    other blocks, split-K parts, stride phases), so an aliased call would read half-written
    results.  Compared by address ranges, which also refuses interleaved views of one buffer;
    an empty array overlaps nothing."""
    if out is None:
        return
    lo, hi = memory_bounds(out)
    if lo == hi:
        return
    for name, a in inputs.items():
        if a is None:
            continue
        a_lo, a_hi = memory_bounds(a)
        if a_lo < hi and lo < a_hi and a_lo < a_hi:
            name, out_name = arg(name), arg("out")
            # (out=None is a way out only where the caller's function has it)
            alternative = ", or out=None" if out_name == "out" else ""
            raise ValueError(f"{out_name} overlaps {name} in memory ({name} is read while "
                             f"{out_name} is written): pass a separate output array{alternative}")


@memoized(None)
def _device_memory(device_id: int) -> int:
    return _cupy().cuda.Device(device_id).mem_info[1]


def check_fits_device(shape: tuple, dtype: str, what: str) -> None:
    """A ValueError naming ``what`` where a new ``shape`` array could never be allocated: more
    bytes than the current GPU has in all (the arguments describe a result no GPU holds)."""
    nbytes = math.prod(shape) * itemsize(dtype)
    device = _cupy().cuda.Device()
    total = _device_memory(device.id)
    if nbytes > total:
        raise ValueError(f"{what} of shape {tuple(shape)} ({dtype}) would take {nbytes:.3g} bytes, "
                         f"more than the {total / 2 ** 30:.0f} GiB of GPU {device.id}: check the "
                         f"sizes, padding and strides")


def prepare_out(out, shape: tuple, dtype: str, inputs: dict | None = None,
                what: str = "the output"):
    """A new output array (``what``, in error messages), or ``out`` after checking that it can
    receive the result in place (and overlaps none of ``inputs``, {name: array})."""
    cupy = _cupy()
    if out is None:
        check_fits_device(shape, dtype, what)
        return cupy.empty(shape, dtype=dtype)
    out = require_array(out, "out")
    check_out_disjoint(out, inputs or {})
    name = arg("out")
    if out.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {out.shape}")
    if out.dtype.name != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {out.dtype.name}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return out


def conv_operands(x, w, bias, out, geometry_kwargs: dict, ndim=None, z=None):
    """Validate the operands of a forward convolution (``z``: the fused epilogue's residual);
    return (geometry, x, w, bias, z, y)."""
    x = require_array(x, "x")
    w = require_array(w, "w")
    dtype = require_float_dtype(x, "x")
    require_float_dtype(w, "w", dtype, first="x")
    geom = ConvGeometry.from_shapes(x.shape, w.shape, dtype=dtype, ndim=ndim, **geometry_kwargs)
    bias = check_bias(bias, geom.out_channels, dtype)
    z = check_residual(z, geom.output_shape, dtype, geom.layout)
    if out is not None:
        out = require_array(out, "out")
    same_device({"x": x, "w": w, "bias": bias, "z": z, "out": out})
    with x.device:
        y = prepare_out(out, geom.output_shape, dtype, {"x": x, "w": w, "bias": bias, "z": z})
    return geom, x, w, bias, z, y
