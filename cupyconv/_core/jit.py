"""JIT compilation of the kernel sources: the only module that touches ``cupy.RawModule``.

Modules are compiled at first use (NVRTC on NVIDIA, HIPRTC on ROCm), kept in memory per device, and
stored on disk, so a later process loads them without compiling: by CuPy's own kernel cache on
NVIDIA, by cupyconv's (:mod:`cupyconv._core.hip_cache`) on ROCm, where CuPy's does not serve
modules compiled with name expressions.  The
in-memory key is an explicit tuple of everything that changes the binary: the
:class:`~cupyconv._core.kernels.KernelModule` (file, templates, dtypes, defines), the compiler options, the
backend, the architecture and the device.  Nothing here runs at import time.

A first call compiles its modules one after another, as it reaches them.  To compile many at once
(NVRTC compiles outside the GIL, and threads compile in parallel), :func:`discovering` runs calls
without compiling or launching anything and notes the modules they ask for, and
:func:`compile_modules` compiles a list of modules on a pool of threads (``cupyconv.jit.precompile``
puts the two together for a list of convolutions).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cupyconv._core.caches import register
from cupyconv._core.kernels import REGISTRY, KernelModule
from cupyconv._core.program import Kernel, bind_thread_context

__all__ = ["precompile", "compile_modules", "discovering", "discovery_active", "cache_info",
           "clear_cache", "get_function", "COMPILE_OPTIONS", "arch_options", "wave_size"]

# CuPy's on-disk cache and HIP (read in CuPy 14.2.0, cupy/cuda/compiler.py): the NVRTC path keys
# its cache on the sorted name expressions too and stores the mangled names beside the cubin, so a
# templated module loads from disk in a new process: NVIDIA uses cupy.RawModule(code=...) as it is.
# ``_compile_with_cache_hip`` reads the disk cache only ``if not name_expressions`` (it recompiles
# to get the mangled names; its key does not hold them), so on ROCm every module here (all are
# templates) would be compiled again by HIPRTC in every new process.  On HIP, modules therefore go
# through a cache of our own (cupyconv/_core/hip_cache.py): HIPRTC compiles through CuPy's
# ``compile_using_nvrtc`` (which calls HIPRTC on ROCm and returns the code object and the lowered
# names) with the options CuPy's RawModule path would use, the code object and the
# name expression -> lowered name table are stored, and a later process loads the code object
# with ``cupy.RawModule(path=...)`` and looks kernels up by lowered name (RawKernels, so kernel
# attributes such as max_dynamic_shared_size_bytes work as on the CuPy path).
# The same flags on both vendors: NVRTC defaults to C++17 and HIPRTC to C++14.
COMPILE_OPTIONS = ("-std=c++17",)


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    module: object = None
    seconds: float = 0.0
    kernels: dict = field(default_factory=dict)  # name expression -> Kernel


_lock = threading.Lock()
_entries: dict[tuple, _Entry] = {}
_stats = {"hits": 0, "misses": 0}


def _target() -> tuple[str, str, int]:
    """(backend, arch, device id) of the current CuPy device."""
    import cupy

    dev = cupy.cuda.Device()
    if cupy.cuda.runtime.is_hip:
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        arch = props["gcnArchName"]
        return "hiprtc", arch.decode() if isinstance(arch, bytes) else str(arch), dev.id
    return "nvrtc", "sm_" + dev.compute_capability, dev.id


def wave_size(arch: str) -> int:
    """Lanes of a warp / wavefront on ``arch``, from the target's name alone: 32 on NVIDIA
    (``sm_*``) and on AMD RDNA (gfx10xx, gfx11xx, gfx12xx: the compilers default to wave32), 64
    on AMD GCN/CDNA (gfx9xx: gfx908, gfx90a, gfx942, gfx950).  ``gcnArchName`` feature suffixes
    (``gfx90a:sramecc+:xnack-``) are ignored."""
    name = arch.split(":", 1)[0].lower()
    if name.startswith("sm_"):
        return 32
    if not name.startswith("gfx") or not name[3:4].isdigit():
        raise ValueError(f"unknown GPU target {arch!r}: expected sm_XX or gfxNNN")
    major = name[3:-2]  # the last two characters are the minor and stepping digits
    return 64 if major in ("6", "7", "8", "9") else 32


def arch_options(arch: str) -> tuple[str, ...]:
    """Options of the target beyond COMPILE_OPTIONS.

    NVIDIA: compute capability 9.0 compiles for sm_90a, whose wgmma the Hopper main loop needs
    (NVRTC keeps the architecture-specific target over the plain -arch=sm_90 that CuPy appends;
    such a binary runs on 9.0 devices only, the ones it is built for).
    AMD: the wave size as ``-DCC_WAVE_SIZE`` (common.cuh's CC_WARP_SIZE), chosen here per target
    because ``__AMDGCN_WAVEFRONT_SIZE`` is deprecated and ROCm 7 made ``warpSize`` a run-time
    value.
    """
    if arch.startswith("gfx"):
        return (f"-DCC_WAVE_SIZE={wave_size(arch)}",)
    return ("-arch=sm_90a",) if arch == "sm_90" else ()


class _HipModule:
    """A code object from the HIP cache: ``get_function(name expression)`` gives the
    ``cupy.RawKernel`` of its lowered name, as ``cupy.RawModule(code=..., name_expressions=...)``
    does."""

    def __init__(self, raw, lowered: dict):
        self.raw = raw
        self.lowered = lowered

    def get_function(self, name: str):
        return self.raw.get_function(self.lowered[name])


def _hip_options(options: tuple) -> tuple:
    """The options HIPRTC gets for ``options`` on CuPy's RawModule path (CuPy 14.2:
    ``assemble_cupy_compiler_options``, then ``_compile_with_cache_hip`` adds
    ``-fcuda-flush-denormals-to-zero`` and hipcc's include directories).  The cache's key holds
    them, so a ROCm upgrade (other include paths) is a miss."""
    from cupy import _environment
    from cupy._core import core

    full = tuple(core.assemble_cupy_compiler_options(tuple(options)))
    full += ("-fcuda-flush-denormals-to-zero",)
    return full + tuple(f"-I{d}" for d in _environment._get_hipcc_include_dirs())


def _hiprtc_version() -> str:
    """HIPRTC's and the HIP runtime's versions (the runtime's carries the patch release)."""
    import cupy
    from cupy.cuda import nvrtc

    return "hiprtc %d.%d, hip %d, cupy %s" % (*nvrtc.getVersion(),
                                              cupy.cuda.runtime.runtimeGetVersion(),
                                              cupy.__version__)


def _hiprtc_compile(code: str, options: tuple, name_expressions) -> tuple[bytes, dict]:
    """Compile with HIPRTC through CuPy (``compile_using_nvrtc`` runs HIPRTC on ROCm): the code
    object and the lowered name of each name expression.  ``options``: complete (_hip_options).
    (CuPy's ``_convert_to_hip_source`` is left out: it changes nothing on ROCm 4.5 and newer.)"""
    from cupy.cuda import compiler

    binary, lowered = compiler.compile_using_nvrtc(
        code, options, filename="cupyconv_module.cu", name_expressions=list(name_expressions))
    return binary, dict(lowered or {})


def _hip_module(code: str, options: tuple, name_expressions, arch: str):
    """The module through cupyconv's HIP cache (hip_cache.py), or None where the cache is off
    or cannot be used (CuPy's path then compiles).  A stored code object that does not load is
    dropped and compiled again."""
    import cupy

    from cupyconv._core import hip_cache

    root = hip_cache.cache_root()
    if root is None:
        return None
    full = _hip_options(options)
    key = hip_cache.cache_key(code, full, arch, _hiprtc_version(), name_expressions)
    compile_fn = lambda: _hiprtc_compile(code, full, name_expressions)  # noqa: E731
    for attempt in range(2):
        try:
            cached, hit = hip_cache.compile_cached(root, key, name_expressions, compile_fn)
        except OSError:
            return None  # an unwritable cache directory: CuPy's path (compiles once more)
        raw = cupy.RawModule(path=str(cached.path))
        try:
            # load now (RawModule loads lazily), so that a bad code object is caught here
            raw.get_function(next(iter(cached.lowered.values())))
            return _HipModule(raw, cached.lowered)
        except Exception:
            if not hit or attempt:
                raise
            hip_cache.discard(root, key)
    return None


def _cache_key(module: KernelModule) -> tuple:
    return (module, COMPILE_OPTIONS) + _target()


def _entry(module: KernelModule) -> _Entry:
    """The cache entry of ``module`` on the current device, its module compiled once."""
    key = _cache_key(module)
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _Entry()
    # Per-entry lock: concurrent first calls for one module compile it once, while other modules
    # compile in parallel.
    with entry.lock:
        if entry.module is not None:
            with _lock:
                _stats["hits"] += 1
            return entry
        import cupy

        bind_thread_context()  # compiling loads the module: a driver call
        start = time.perf_counter()
        options = COMPILE_OPTIONS + arch_options(key[3])
        raw = None
        if key[2] == "hiprtc":
            raw = _hip_module(module.code, options, module.name_expressions, key[3])
        if raw is None:  # NVIDIA, or the HIP cache is off or unusable: CuPy's own path
            raw = cupy.RawModule(code=module.code, options=options,
                                 name_expressions=list(module.name_expressions))
            raw.compile()
        entry.seconds = time.perf_counter() - start
        entry.module = raw
        with _lock:
            _stats["misses"] += 1
        return entry


# While discovering (see discovering()): the modules asked for so far, in order (a dict as an
# ordered set); None otherwise.
_DISCOVERY: contextvars.ContextVar = contextvars.ContextVar("cupyconv_discovery", default=None)


@contextlib.contextmanager
def discovering():
    """Within the block :func:`get_function` compiles nothing and no kernel of it launches: each
    module asked for is noted in the yielded dict's keys (in order), and the kernel handed out
    compiles its module at its first use after the block (:class:`_Pending`), so one that a
    plan cache kept still works.  The prepared-call cache remembers nothing made in the block
    and the autotuner does not run (see their modules)."""
    found: dict = {}
    token = _DISCOVERY.set(found)
    try:
        yield found
    finally:
        _DISCOVERY.reset(token)


def discovery_active() -> bool:
    return _DISCOVERY.get() is not None


class _Pending:
    """The kernel of a module handed out while discovering, in place of the ``cupy.RawKernel``
    of a :class:`~cupyconv._core.program.Kernel`: a launch within a discovery does nothing but
    note the module (a plan cache may hand the same Kernel to a later discovery); the first use
    outside one compiles (or finds) the module, applies the dynamic shared memory opted in
    meanwhile and puts the real kernel in the Kernel's place."""

    __slots__ = ("module", "name", "smem", "owner", "raw")

    def __init__(self, module: KernelModule, name: str):
        self.module, self.name, self.smem, self.owner, self.raw = module, name, 0, None, None

    def resolve(self):
        """The real kernel (kept here too: a program recorded through this stand-in keeps it,
        and so its module, loaded)."""
        if self.raw is None:
            raw = _entry(self.module).module.get_function(self.name)
            if self.smem > raw.max_dynamic_shared_size_bytes:
                raw.max_dynamic_shared_size_bytes = self.smem
            self.raw = self.owner.raw = raw
        return self.raw

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.smem if discovery_active() else self.resolve().max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        if discovery_active():
            self.smem = max(self.smem, value)  # (applied when the module is there: resolve)
        else:
            self.resolve().max_dynamic_shared_size_bytes = value

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        found = _DISCOVERY.get()
        if found is not None:  # (also a stand-in a plan cache kept from an earlier discovery)
            found.setdefault(self.module)
            return
        self.resolve()(grid, block, args, shared_mem=shared_mem)

    def __getattr__(self, name):  # the kernel's other attributes (kernel, num_regs, ...)
        return getattr(self.resolve(), name)


def get_function(module: KernelModule, template: str, dtype: str,
                 variant: tuple[int, ...] = ()) -> Kernel:
    """The kernel ``template<dtype, *tile, *variant>`` of ``module``, compiled on first use (a
    :class:`~cupyconv._core.program.Kernel`: launches made while recording a call are seen).
    While :func:`discovering`, the module is noted instead and nothing is compiled."""
    module = module.for_dtype(dtype)  # (compiled per dtype: KernelModule.for_dtype)
    found = _DISCOVERY.get()
    if found is not None:
        found.setdefault(module)
        pending = _Pending(module, module.name_expression(template, dtype, variant))
        pending.owner = Kernel(pending)
        return pending.owner
    entry = _entry(module)
    name = module.name_expression(template, dtype, variant)
    kernel = entry.kernels.get(name)
    if kernel is None:
        bind_thread_context()  # loading the module is a driver call (see there)
        kernel = entry.kernels[name] = Kernel(entry.module.get_function(name))
    return kernel


def _device_id() -> int:
    import cupy

    return cupy.cuda.Device().id


def _on_device(device: int):
    import cupy

    return cupy.cuda.Device(device)


def default_workers() -> int:
    """Compiling threads: one per CPU this process may run on (compiling is CPU-bound), at most
    32 (each NVRTC compile of a GEMM module holds a few hundred MB while it runs)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 32))


def compile_modules(modules, workers: int | None = None) -> int:
    """Compile (or load from the disk caches) each of ``modules`` for the current device, on
    ``workers`` threads at once (default: :func:`default_workers`).  NVRTC compiles outside the
    GIL, each module once however many threads ask (its entry's lock), and the disk caches are
    written atomically, so this is as safe as first calls in several threads or processes.
    (HIPRTC is thread-safe too, but comgr serializes its compiles behind locks: on ROCm the
    threads overlap loading, not compiling.)  Returns how many distinct modules were compiled or
    found: each module counts as the per-dtype modules the JIT compiles for it
    (``KernelModule.units``)."""
    modules = tuple(dict.fromkeys(unit for m in modules for unit in m.units()))
    device = _device_id()  # the caller's device, also in the pool's threads

    def one(m):
        with _on_device(device):
            _entry(m)

    workers = min(workers or default_workers(), len(modules))
    if workers <= 1:
        for m in modules:
            one(m)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cupyconv-jit") as pool:
            for _ in pool.map(one, modules):  # (re-raises the first compile error)
                pass
    return len(modules)


def precompile(modules=None, workers: int | None = None) -> int:
    """Compile ``modules`` (default: every registered kernel) for the current device now, several
    at once (:func:`compile_modules`).  The public ``cupyconv.jit.precompile`` also takes a list
    of convolutions and compiles what they run.  Returns how many modules were compiled or
    found in the cache."""
    return compile_modules(REGISTRY if modules is None else modules, workers)


def cache_info() -> dict:
    """Hits and misses of the in-memory cache and, per loaded module, its key and compile time.

    A miss that found the binary in the on-disk cache (CuPy's, or on ROCm cupyconv's) shows a
    compile time of milliseconds.
    """
    with _lock:
        loaded = [{"source": k[0].source, "templates": k[0].templates, "dtypes": k[0].dtypes,
                   "defines": k[0].defines, "tile": k[0].tile, "variants": k[0].variants, "backend": k[2], "arch": k[3], "device": k[4],
                   "seconds": e.seconds} for k, e in _entries.items() if e.module is not None]
        return {"hits": _stats["hits"], "misses": _stats["misses"], "modules": loaded}


@register
def clear_cache() -> None:
    """Forget every loaded module (CuPy's on-disk cache is left alone) and reset the counters."""
    with _lock:
        _entries.clear()
        _stats["hits"] = _stats["misses"] = 0
