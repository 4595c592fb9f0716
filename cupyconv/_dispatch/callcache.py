"""The cache of prepared calls: what a warm call of a public function does.

Validating the arguments, building the geometry, choosing an algorithm and planning its launches
cost tens to hundreds of microseconds of Python, more than a small kernel runs.  A call whose
arrays (shape, strides, dtype, device, 16-byte alignment) and options equal those of an earlier
call that passed validation gets that call's :class:`PreparedCall`: check ``out`` (the one rule
that depends on addresses), allocate the result, replay the recorded launches
(:mod:`cupyconv._core.program`).  Every other rule that could reject the call depends only on the
key, so the errors are the same as on the full path.

GPU arrays of other libraries take the warm path too: :func:`call_key` keys them by their
:func:`~cupyconv._core.foreign.describe` description (a PyTorch tensor from its own attributes,
another array from one read of its ``__cuda_array_interface__``), the one the full path's CuPy
view is made from, and hands the prepared call that description in their place (its device
pointer, no view); the others (DLPack only) are converted once, as the full path converts them.
"""

from __future__ import annotations

from cupyconv._core.arrays import check_out_disjoint, gpu_view
from cupyconv._core.caches import register
from cupyconv._core.foreign import ForeignArray, describe
from cupyconv._core.geometry import _freeze
from cupyconv._core.jit import discovery_active
from cupyconv._core.program import recording, verify, verify_enabled
from cupyconv._gemm.launch import plan_hooks_active

_MAX_ENTRIES = 4096
_calls: dict = {}


_PLAIN = frozenset((int, str, type(None)))
_PLAIN_OR_TUPLE = _PLAIN | {tuple}
# Tags the options of a key that holds flat tuples of plain values as they are (stride=(1, 1)):
# such a key can then equal neither a key of plain options nor a frozen one.
_FLAT_TUPLES = object()


def call_key(name: str, arrays: tuple, options: tuple):
    """``(key, operands)`` of a call: the cache key, or None where an argument is neither None
    nor a GPU array (or an option is unhashable): such calls take the full path, which reports
    the error.  ``operands`` are ``arrays`` as a prepared call takes them: CuPy arrays and None
    as they are, another library's array as its :class:`ForeignArray` (or its CuPy view, where
    only a conversion describes it)."""
    import cupy

    ndarray = cupy.ndarray
    parts = [name]
    for a in arrays:
        if a is None:
            parts.append(None)
        elif type(a) is ndarray:
            data = a.data
            parts.append((a.shape, a.strides, a.dtype, data.device_id, data.ptr & 15))
        else:
            return _foreign_call_key(name, arrays, options, ndarray)
    return _with_options(parts, options), arrays


def _with_options(parts: list, options: tuple):
    # plain ints, strings and None as themselves, and flat tuples of them (per-dim strides,
    # padding, cuDNN's pad / stride / dilation tuples); anything else typed (True must not pass
    # as 1; _freeze costs a few microseconds a call)
    types = {*map(type, options)}
    if types <= _PLAIN:
        parts.append(options)
        return tuple(parts)
    if types <= _PLAIN_OR_TUPLE and all({*map(type, v)} <= _PLAIN for v in options
                                        if type(v) is tuple):
        parts.append((_FLAT_TUPLES, options))
        return tuple(parts)
    parts.append(_freeze(options))
    key = tuple(parts)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _foreign_call_key(name: str, arrays: tuple, options: tuple, ndarray):
    """:func:`call_key` where an argument is not exactly a ``cupy.ndarray``."""
    parts, operands = [name], []
    for a in arrays:
        if a is None:
            entry = None
        else:
            if type(a) is not ndarray:
                a = _operand(a, ndarray)
                if a is None:
                    return None, arrays
            if isinstance(a, ForeignArray):
                entry = a.key
            else:
                data = a.data
                entry = (a.shape, a.strides, a.dtype, data.device_id, data.ptr & 15)
        parts.append(entry)
        operands.append(a)
    return _with_options(parts, options), tuple(operands)


def _operand(a, ndarray):
    """``a`` as a prepared call takes it: a CuPy array (a subclass too) as itself, another
    library's array as its description, else as its CuPy view (DLPack only, ...); None where
    the full path refuses it (a CPU array, a tensor that requires grad), which says why."""
    if isinstance(a, (ndarray, ForeignArray)):  # (a description: cupyconv.cudnn's operands)
        return a
    try:
        described = describe(a)
    except Exception:  # (the conversion below meets the same error, or takes DLPack)
        described = None
    if described is not None:
        return described
    try:
        return gpu_view(a, "array")
    except Exception:
        return None


def lookup(key):
    """The prepared call of ``key``, or None (always None inside the GEMM plan hooks)."""
    if key is None or plan_hooks_active():
        return None
    return _calls.get(key)


def remember(key, call) -> None:
    if key is None or plan_hooks_active() or discovery_active():
        return
    if len(_calls) >= _MAX_ENTRIES:
        _calls.clear()
    _calls[key] = call


@register
def clear() -> None:
    """Forget every prepared call."""
    _calls.clear()


class PreparedCall:
    """The warm path of one validated call: ``call(inputs, out)`` (the operands of
    :func:`call_key`) checks that ``out`` (when given) overlaps no input, allocates the result
    otherwise, and replays the call's device work on the device it was prepared for, on the
    current stream of that device."""

    __slots__ = ("replay", "shape", "dtype", "device", "names", "recorded", "_empty",
                 "_get_device")

    def __init__(self, replay, shape, dtype, device: int, names: tuple, recorded: bool):
        import cupy

        self.replay, self.shape, self.dtype, self.device = replay, shape, dtype, device
        self.names, self.recorded = names, recorded
        self._empty, self._get_device = cupy.empty, cupy.cuda.runtime.getDevice

    def __call__(self, inputs: tuple, out):
        if out is not None:  # (no dict is built without out)
            check_out_disjoint(out, dict(zip(self.names, inputs)))
        if self._get_device() != self.device:
            import cupy

            with cupy.cuda.Device(self.device):
                return self._run(inputs, out)
        return self._run(inputs, out)

    def _run(self, inputs, out):
        if out is None:
            y = self._empty(self.shape, dtype=self.dtype)
        else:  # (the result is a CuPy array: a view of a foreign out)
            y = out.cupy() if isinstance(out, ForeignArray) else out
        if not self.recorded:  # the full path's run takes CuPy arrays
            inputs = tuple(a.cupy() if isinstance(a, ForeignArray) else a for a in inputs)
        self.replay(inputs + (y,))
        return y


def prepare(run_full, names: tuple, inputs: tuple, y) -> PreparedCall:
    """Run a validated call's device work ``run_full(inputs, y)`` (on the current device, which
    holds the arrays) while recording it, and return the call's :class:`PreparedCall`: a replay
    of the recording, or, where the work could not be recorded, ``run_full`` again per call."""
    import cupy

    if discovery_active():  # (jit.discovering: nothing launches, so there is nothing to record)
        run_full(inputs, y)
        return PreparedCall(lambda ops: run_full(ops[:-1], ops[-1]), y.shape, y.dtype,
                            cupy.cuda.runtime.getDevice(), names, False)
    operands = inputs + (y,)
    with recording(operands) as rec:
        run_full(inputs, y)
    program = rec.program(outputs=(len(inputs),))
    if program is not None and verify_enabled():
        verify(program, operands)
    replay = (program.run if program is not None
              else lambda ops: run_full(ops[:-1], ops[-1]))
    return PreparedCall(replay, y.shape, y.dtype, cupy.cuda.runtime.getDevice(), names,
                        program is not None)
