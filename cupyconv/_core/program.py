"""Prepared calls: the device work of one call, recorded once and replayed with new arrays.

A public function's first call with given shapes runs the whole pipeline (validate, geometry,
choose, plan, launch).  Its launches go through :class:`Kernel`, which, while a
:func:`recording` is active, writes each launch down: the kernel's function handle, grid, block,
shared memory and its arguments as bytes, with every array argument resolved to *where it points*:
an operand of the call (x, w, bias, the output; views of them as a byte offset), a temporary
the call allocated with :func:`scratch`, or a constant (:func:`keep_constant`).  The resulting
:class:`Program` replays the same launches for a later call whose arrays have the same shapes,
strides, dtypes, device and alignment (the call-cache key): it allocates the temporaries, writes
the new pointers into the recorded argument bytes and launches through the driver, with no Python
work per scalar argument.

A tensor map (TMA's descriptor of an array, passed by value) is an :class:`AddressArg`: the
recording keeps its encoder, and a replay re-encodes it where an operand's address changed.

Anything the recorder cannot place (an array of unknown origin, a Python scalar of unknown width,
device work other than a recorded launch or :func:`zero_fill`, declared with
:func:`not_preparable`) makes the recording fail, and the call stays on the full path: slower,
never wrong.  ``CUPYCONV_VERIFY_PREPARED=1`` (the test suite sets it) replays every new program
once into NaN-poisoned outputs and temporaries and compares the result with the full path's.
"""

from __future__ import annotations

import contextlib
import math
import contextvars
import os
import threading

import numpy as np

from cupyconv._core.arrays import memory_bounds
from cupyconv._core.caches import register

_RECORDER: contextvars.ContextVar = contextvars.ContextVar("cupyconv_recorder", default=None)
# device pointer -> constant array (see keep_constant); a program keeps the ones it points at
_CONSTANTS: dict[int, object] = {}
_THREAD = threading.local()  # .bound: this host thread has a CUDA context current


def bind_thread_context() -> None:
    """Make the current device's primary context current in this host thread, once per thread.

    A new host thread (dask's threaded scheduler, a thread pool) has no CUDA context current
    until a runtime call creates one; kernels load (``cuModuleLoadData``) and launch
    (``cuLaunchKernel``) through the driver API, which then fails with
    ``CUDA_ERROR_INVALID_CONTEXT`` -- e.g. a thread whose first GPU work is a cupyconv call on
    arrays made elsewhere, with its output served from CuPy's pool.  ``cudaSetDevice`` binds the
    primary context (CUDA 12+; CuPy's ``Device.use`` skips it when the id is already current).
    Later device switches go through ``cudaSetDevice`` as well, so the thread stays bound."""
    if not getattr(_THREAD, "bound", False):
        from cupy.cuda import runtime

        runtime.setDevice(runtime.getDevice())
        _THREAD.bound = True


class AddressArg:
    """A by-value kernel argument derived from an array's address, such as a TMA tensor map:
    ``encode(ptr)`` returns its bytes for the array at ``ptr`` as a one-element NumPy array
    (which CuPy's launch passes by value) of at most 128 bytes, 64-byte aligned in the kernel's
    parameter space.  A recorded launch re-encodes it on replay for the replay's address."""

    __slots__ = ("array", "encode", "value")
    ALIGN = 64

    def __init__(self, array, encode):
        self.array, self.encode = array, encode
        self.value = encode(array.data.ptr)


class Kernel:
    """A compiled kernel (a ``cupy.RawKernel``) whose launches a :func:`recording` sees."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.raw.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self.raw.max_dynamic_shared_size_bytes = value

    def __getattr__(self, name):  # attributes (num_regs, ...) of the CuPy kernel
        return getattr(self.raw, name)

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        bind_thread_context()
        rec = _RECORDER.get()
        if rec is not None:
            rec.launch(self.raw, grid, block, args, shared_mem)
        if any(type(v) is AddressArg for v in args):
            args = tuple(v.value if type(v) is AddressArg else v for v in args)
        self.raw(grid, block, args, shared_mem=shared_mem)


def keep_constant(array):
    """Mark ``array`` (device memory written once, e.g. packed kernel arguments) as a constant
    that prepared calls may point at (each program then holds a reference to it)."""
    _CONSTANTS[array.data.ptr] = array
    return array


register(_CONSTANTS.clear)


def scratch(shape, dtype):
    """A temporary device array of a launch path (workspace, transformed operand): recorded
    programs allocate it afresh on every replay."""
    import cupy

    a = cupy.empty(shape, dtype=dtype)
    rec = _RECORDER.get()
    if rec is not None:
        rec.temps.append((a.data.ptr, a.data.mem.size, a))
    return a


def zero_fill(a) -> None:
    """``a[...] = 0`` for a C-contiguous array, as one memset (recorded)."""
    import cupy

    if not a.flags.c_contiguous:
        raise ValueError("zero_fill needs a C-contiguous array")
    if a.nbytes == 0:
        return
    rec = _RECORDER.get()
    if rec is not None:
        rec.memset(a)
    cupy.cuda.runtime.memsetAsync(a.data.ptr, 0, a.nbytes, cupy.cuda.get_current_stream().ptr)


def not_preparable(reason: str) -> None:
    """Declare that the running call does device work a program cannot replay (a CuPy operation,
    a host read): the call stays on the full path."""
    rec = _RECORDER.get()
    if rec is not None:
        rec.fail(reason)


class _Failed(Exception):
    pass


class Recorder:
    """Collects the steps of one call (see the module docstring)."""

    def __init__(self, operands: tuple):
        self.operands = operands
        self.spans = [(memory_bounds(a) if a is not None else None) for a in operands]
        self.temps: list = []       # (base pointer, bytes, array) in allocation order
        self.steps: list = []
        self.failure: str | None = None

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason

    def _place(self, a) -> tuple[int, int]:
        """(buffer, byte offset) of array ``a``: buffers are the operands, then the temps."""
        ptr = a.data.ptr
        for i, op in enumerate(self.operands):
            if op is a:
                return i, 0
        lo, hi = memory_bounds(a)
        owners = [i for i, sp in enumerate(self.spans)
                  if sp is not None and sp[0] <= lo and (hi <= sp[1] or lo == hi)]
        if len(owners) == 1:
            return owners[0], ptr - self.operands[owners[0]].data.ptr
        if owners:
            raise _Failed("an argument lies in more than one operand (aliased inputs)")
        for j, (base, size, _) in enumerate(self.temps):
            if base <= ptr < base + max(size, 1):
                return len(self.operands) + j, ptr - base
        if ptr in _CONSTANTS:
            return -1, ptr
        raise _Failed("an array argument of unknown origin")

    def launch(self, raw, grid, block, args, smem) -> None:
        if self.failure is not None:
            return
        import cupy

        try:
            # the kernel object keeps its module loaded while the program exists (a module freed
            # by jit.clear_cache() would leave the recorded function handle dangling)
            layout, slots, offsets, keep, encoded = bytearray(), [], [], [raw], []
            for v in args:
                if type(v) is AddressArg:
                    buf, off = self._place(v.array)
                    layout += bytes(-len(layout) % AddressArg.ALIGN)
                    offsets.append(len(layout))
                    encoded.append((len(layout), buf, off, v.encode))
                    layout += v.value.tobytes()
                    continue
                if isinstance(v, cupy.ndarray):
                    buf, off = self._place(v)
                    size, data = 8, None
                    if buf == -1:
                        data = np.uint64(off).tobytes()
                        keep.append(_CONSTANTS[off])
                elif v is None:
                    size, data = 8, bytes(8)
                elif isinstance(v, np.generic) and v.dtype.kind in "biuf":
                    size, data = v.dtype.itemsize, v.tobytes()
                elif isinstance(v, np.ndarray) and v.size == 1 and v.dtype.kind == "V":
                    # a struct passed by value (CuPy passes a one-element array's bytes): at its
                    # dtype's alignment, which an aligned NumPy struct shares with the C one
                    size, data = v.dtype.alignment, v.tobytes()
                else:
                    raise _Failed(f"a kernel argument of type {type(v).__name__}")
                layout += bytes(-len(layout) % size)  # natural alignment, as the ABI lays out
                offsets.append(len(layout))
                if data is None:
                    slots.append((len(layout), buf, off))
                    data = bytes(8)
                layout += data
            grid = tuple(grid) + (1,) * (3 - len(grid))
            block = tuple(block) + (1,) * (3 - len(block))
            self.steps.append(_LaunchStep(raw.kernel.ptr, grid, block, smem, bytes(layout),
                                          offsets, slots, keep, encoded))
        except _Failed as e:
            self.fail(str(e))

    def memset(self, a) -> None:
        if self.failure is not None:
            return
        try:
            buf, off = self._place(a)
        except _Failed as e:
            self.fail(str(e))
            return
        self.steps.append(_MemsetStep(buf, off, a.nbytes))

    def program(self, outputs: tuple[int, ...]) -> "Program | None":
        if self.failure is not None:
            return None
        return Program([size for _, size, _ in self.temps], self.steps, outputs)


class _LaunchStep:
    """One recorded launch: argument bytes with pointer slots, and the kernelParams array (one
    address per argument into those bytes) that cuLaunchKernel / hipModuleLaunchKernel read."""

    __slots__ = ("fptr", "grid", "block", "smem", "storage", "words", "params", "slots", "keep",
                 "encoded")

    def __init__(self, fptr, grid, block, smem, layout: bytes, offsets, slots, keep, encoded=()):
        self.fptr, self.grid, self.block, self.smem = fptr, grid, block, smem
        self.keep = keep  # the kernel and the constant arrays the argument bytes point at
        self.storage = np.zeros(len(layout) + -len(layout) % 8, dtype=np.uint8)
        self.storage[:len(layout)] = np.frombuffer(layout, dtype=np.uint8)
        self.words = self.storage.view(np.uint64)
        base = self.storage.ctypes.data
        self.params = np.array([base + o for o in offsets], dtype=np.uint64)
        self.slots = [(off // 8, buf, delta) for off, buf, delta in slots]
        # AddressArg slots: [byte offset, buffer, delta, encoder, address last encoded]
        self.encoded = [[pos, buf, delta, encode, None] for pos, buf, delta, encode in encoded]

    def run(self, ptrs, stream: int, launch) -> None:
        words = self.words
        for word, buf, delta in self.slots:
            words[word] = ptrs[buf] + delta
        for slot in self.encoded:
            ptr = ptrs[slot[1]] + slot[2]
            if ptr != slot[4]:
                value = slot[3](ptr).view(np.uint8)
                self.storage[slot[0]:slot[0] + value.size] = value
                slot[4] = ptr
        g, b = self.grid, self.block
        launch(self.fptr, g[0], g[1], g[2], b[0], b[1], b[2], self.smem, stream,
               self.params.ctypes.data, 0)


class _MemsetStep:
    """One recorded :func:`zero_fill`: a memset of ``nbytes`` at a buffer's offset."""

    __slots__ = ("buf", "off", "nbytes", "memset")

    def __init__(self, buf, off, nbytes):
        import cupy

        self.buf, self.off, self.nbytes = buf, off, nbytes
        self.memset = cupy.cuda.runtime.memsetAsync

    def run(self, ptrs, stream: int, launch) -> None:
        self.memset(ptrs[self.buf] + self.off, 0, self.nbytes, stream)


class Program:
    """The replayable device work of one call (see the module docstring).  ``run(operands)``
    with arrays shaped like the recorded call's (None where it had None) on the current device
    and stream.  Thread-safe: one replay at a time writes the argument bytes."""

    __slots__ = ("temp_bytes", "steps", "outputs", "lock", "_alloc", "_stream", "_launch",
                 "_memset")

    def __init__(self, temp_bytes, steps, outputs):
        import cupy
        from cupy.cuda import driver

        self.temp_bytes, self.steps = temp_bytes, steps
        self.outputs = outputs
        self.lock = threading.Lock()
        # bound once: a replay is a few microseconds, module attribute lookups count
        self._alloc, self._stream = cupy.cuda.alloc, cupy.cuda.get_current_stream
        self._launch, self._memset = driver.launchKernel, cupy.cuda.runtime.memsetAsync

    def run(self, operands, poison: bool = False) -> None:
        ptrs = [0 if a is None else a.data.ptr for a in operands]
        temps = None
        if self.temp_bytes:  # freed when this returns: the pool reuses them in stream order
            temps = [self._alloc(n) for n in self.temp_bytes]
            ptrs += [t.ptr for t in temps]
        bind_thread_context()
        stream = self._stream().ptr
        if poison and temps:
            for t, n in zip(temps, self.temp_bytes):
                self._memset(t.ptr, 0xFF, n, stream)
        launch = self._launch
        with self.lock:
            for step in self.steps:
                step.run(ptrs, stream, launch)


def verify_enabled() -> bool:
    return os.environ.get("CUPYCONV_VERIFY_PREPARED", "") not in ("", "0")


@contextlib.contextmanager
def recording(operands: tuple):
    """Record the device work done inside the block for ``operands`` (see :class:`Recorder`)."""
    rec = Recorder(operands)
    token = _RECORDER.set(rec)
    try:
        yield rec
    finally:
        _RECORDER.reset(token)


def verify(program: Program, operands: tuple) -> None:
    """Replay ``program`` into NaN-poisoned copies of its outputs (and poisoned temporaries) and
    compare with what the full path wrote there (``CUPYCONV_VERIFY_PREPARED=1``)."""
    import cupy

    ops = list(operands)
    for i in program.outputs:
        ops[i] = cupy.full_like(operands[i], np.nan)
    program.run(ops, poison=True)
    for i in program.outputs:
        want, got = operands[i], ops[i]
        if want.size == 0:
            continue
        tol = {2: 1e-2, 4: 1e-5, 8: 1e-12}[want.itemsize]
        # (the scale of the finite values: a NaN or inf in the result, as non-finite inputs give,
        # must not make the tolerance NaN or infinite; non-finite elements must match exactly)
        scale = float(abs(want).max())
        if not math.isfinite(scale):  # (masked, not indexed: results may pass 2**31 elements)
            scale = float(cupy.where(cupy.isfinite(want), abs(want), 0).max())
        if not bool(cupy.allclose(got, want, rtol=tol, atol=tol * (scale or 1.0),
                                  equal_nan=True)):
            raise AssertionError(f"a prepared call's replay differs from its full path (operand "
                                 f"{i}, shape {want.shape}, {want.dtype})")
