"""GPU-free compile check: every registered kernel module, built for NVIDIA and AMD targets.

NVRTC is reached through CuPy's program wrapper (the same option assembly ``cupy.RawModule`` uses),
compiling to cubin so that ptxas runs too.  HIPRTC is called through ctypes from ``libamdhip64``
(Debian's ROCm ships it there), in worker subprocesses because comgr can abort the whole process
on some targets (a worker compiles many modules in turn; a compile that kills its worker is
retried alone, to name it).  Debian 12's HIPRTC is ROCm 5.2: it knows gfx908/gfx90a/gfx1030 and
crashes on newer targets, so gfx942 (MI300), gfx1100 (RDNA3), gfx1201 (RDNA4) and, where the
installed clang knows it, gfx950 (MI355) are compiled by clang (``clang-19 -x hip
--cuda-device-only -nogpulib -O3 -S``) from the same source with the same options and the same
wave-size define; the modules that share one source text are compiled there as one translation
unit (23 instead of 325 compiles per target).  Nothing touches a GPU.

Results are cached on disk by a hash of everything that changes the outcome (compiler and its
version, target, options, source, instantiations): a repeated check compiles only what changed.
The cache lives in ``$CUPYCONV_COMPILE_CHECK_CACHE`` if set (``0``/``off``: no cache), else in
``compile-check/`` under cupyconv's user cache directory (``~/.cache/cupyconv``).

The demo without a GPU (and ``compile-check --sample``) compiles :func:`sample` instead: one
template instantiation per (kernel source, kernel, dtype class, GEMM main loop), for sm_80, sm_90a
and one AMD target where an AMD compiler is installed, in a minute or two on two cores.

A missing compiler is reported as ``skipped``; with ``CUPYCONV_REQUIRE_COMPILERS=1`` it is a failure,
which is how CI makes sure the check really ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import re
import shutil
import tempfile
import ctypes.util
import hashlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from cupyconv._core.caches import memoized
from cupyconv._core.kernels import REGISTRY, KernelModule, main_loop
from cupyconv._core.jit import arch_options
from cupyconv.jit import COMPILE_OPTIONS

NVIDIA_ARCHS = ("sm_80", "sm_90a")  # sm_90a: what the JIT compiles for on Hopper (jit.arch_options)
AMD_ARCHS = ("gfx90a", "gfx908", "gfx1030")  # HIPRTC (Debian 12: ROCm 5.2)
# clang -x hip: targets Debian's HIPRTC cannot compile.  gfx950 only where an installed clang
# knows it (clang-19 does not; Debian's clang-22 does).
CLANG_ARCHS = ("gfx942", "gfx1100", "gfx1201")
CLANG_OPTIONAL_ARCHS = ("gfx950",)
CLANG_NAMES = ("clang-19", "clang-20", "clang-21", "clang-22", "clang")
REPORT_ARCHS = ("gfx90a", "gfx942")  # compile-check --report: resources per kernel
REQUIRE_ENV = "CUPYCONV_REQUIRE_COMPILERS"
# Where successful compiles are recorded (see the module docstring); "0"/"off"/"none": nowhere.
CACHE_ENV = "CUPYCONV_COMPILE_CHECK_CACHE"
# Comma-separated fnmatch patterns of module sources (e.g. "common/copy.cu,gemm/im2col.cu"):
# check only those (the demo without a GPU reads it too).
MODULES_ENV = "CUPYCONV_COMPILE_CHECK_MODULES"
_CACHE_OFF = ("0", "off", "none", "no", "false")
_HIP_LIBS = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")


@dataclass
class CheckResult:
    """Outcome of compiling one module for one target: ``ok``, ``failed`` or ``skipped``."""

    source: str
    vendor: str
    arch: str
    status: str
    seconds: float = 0.0
    log: str = ""


class CompilerMissing(RuntimeError):
    """The compiler for a vendor cannot be loaded on this machine."""


# --------------------------------------------------------------------------- NVIDIA
def nvrtc_compile(code: str, name_expressions, arch: str) -> dict:
    """Compile ``code`` to a cubin for ``arch``; return the lowered names.  Raises on error."""
    try:
        from cupy._core import core
        from cupy.cuda import compiler
    except Exception as exc:  # pragma: no cover - depends on the machine
        raise CompilerMissing(f"CuPy cannot be imported: {exc}") from exc
    # Private CuPy helpers (pinned by the cupy version range in pyproject.toml): the public
    # compile paths query the device even when an arch is given.
    opts = core.assemble_cupy_compiler_options(COMPILE_OPTIONS) + (
        "-ftz=true", "--device-as-default-execution-space", f"-arch={arch}")
    try:
        prog = compiler._NVRTCProgram(code, "cupyconv_kernel.cu",
                                      name_expressions=list(name_expressions), method="cubin")
    except Exception as exc:
        if "nvrtc" in str(exc).lower() or isinstance(exc, (OSError, ImportError)):
            raise CompilerMissing(f"NVRTC is not available: {exc}") from exc
        raise
    _, mapping = prog.compile(opts)
    return dict(mapping or {})


# --------------------------------------------------------------------------- AMD
def _load_hiprtc():
    for name in _HIP_LIBS:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    found = ctypes.util.find_library("amdhip64")
    if found:
        return ctypes.CDLL(found)
    raise CompilerMissing("HIPRTC (libamdhip64) not found: on Debian/Ubuntu install it with "
                          "`apt-get install --no-install-recommends hipcc libamdhip64-dev`")


def _hiprtc_compile_in_process(code: str, name_expressions, arch: str) -> dict:
    lib = _load_hiprtc()
    c_void_pp = ctypes.POINTER(ctypes.c_void_p)
    lib.hiprtcCreateProgram.argtypes = [c_void_pp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                        ctypes.c_void_p, ctypes.c_void_p]
    lib.hiprtcAddNameExpression.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.hiprtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_char_p)]
    lib.hiprtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.hiprtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.hiprtcGetCodeSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.hiprtcGetLoweredName.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                         ctypes.POINTER(ctypes.c_char_p)]
    lib.hiprtcDestroyProgram.argtypes = [c_void_pp]

    prog = ctypes.c_void_p()
    rc = lib.hiprtcCreateProgram(ctypes.byref(prog), code.encode(), b"cupyconv_kernel.cu", 0, None, None)
    if rc != 0:
        raise RuntimeError(f"hiprtcCreateProgram failed with code {rc}")
    try:
        for ne in name_expressions:
            lib.hiprtcAddNameExpression(prog, ne.encode())
        opts = [o.encode() for o in COMPILE_OPTIONS + (f"--offload-arch={arch}",)]
        rc = lib.hiprtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.hiprtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        lib.hiprtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc != 0:
            raise RuntimeError(f"HIPRTC error {rc} for {arch}:\n{log}")
        lib.hiprtcGetCodeSize(prog, ctypes.byref(size))
        if size.value == 0:
            raise RuntimeError(f"HIPRTC produced no code for {arch}:\n{log}")
        lowered = {}
        for ne in name_expressions:
            out = ctypes.c_char_p()
            if lib.hiprtcGetLoweredName(prog, ne.encode(), ctypes.byref(out)) != 0:
                raise RuntimeError(f"HIPRTC has no lowered name for {ne}")
            lowered[ne] = out.value.decode()
        return lowered
    finally:
        lib.hiprtcDestroyProgram(ctypes.byref(prog))


_WORKER_CMD = [sys.executable, "-m", "cupyconv._cli.compile_check", "--hiprtc-worker"]


def hiprtc_compile(code: str, name_expressions, arch: str, timeout: float = 300) -> dict:
    """Compile ``code`` with HIPRTC for ``arch`` in a subprocess of its own; return the lowered
    names."""
    _load_hiprtc()  # fail fast, in this process, when the library is absent
    request = json.dumps({"code": code, "names": list(name_expressions), "arch": arch})
    proc = subprocess.run(_WORKER_CMD, input=request + "\n", capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"HIPRTC worker died with code {proc.returncode}")
    reply = json.loads(proc.stdout)
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply["lowered"]


class _HiprtcWorker:
    """A HIPRTC subprocess that compiles one request after another (a line of JSON in, a line of
    JSON out): Python's start, the imports and comgr's initialisation are paid once per worker
    instead of once per compile.  comgr can abort the process: a compile whose worker dies is
    compiled again alone (:func:`hiprtc_compile`), so the failure names the culprit with its own
    log, and the next compile starts a fresh worker."""

    def __init__(self):
        self.proc = None

    def compile(self, code: str, name_expressions, arch: str, timeout: float = 300) -> dict:
        _load_hiprtc()
        request = json.dumps({"code": code, "names": list(name_expressions), "arch": arch})
        try:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen(_WORKER_CMD, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                             text=True)
            timer = threading.Timer(timeout, self.proc.kill)
            timer.start()
            try:
                self.proc.stdin.write(request + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            finally:
                timer.cancel()
            reply = json.loads(line) if line else None
        except (OSError, ValueError):
            reply = None
        if reply is None:  # the worker died (or hung): retry alone to name the culprit
            self.close()
            return hiprtc_compile(code, name_expressions, arch, timeout)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["lowered"]

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _WorkerPool:
    """One :class:`_HiprtcWorker` per compiling thread, all closed at the end of a check."""

    def __init__(self):
        self._local = threading.local()
        self._all = []
        self._lock = threading.Lock()

    def compile(self, code, name_expressions, arch):
        worker = getattr(self._local, "worker", None)
        if worker is None:
            worker = self._local.worker = _HiprtcWorker()
            with self._lock:
                self._all.append(worker)
        return worker.compile(code, name_expressions, arch)

    def close(self):
        for worker in self._all:
            worker.close()


# --------------------------------------------------------------------------- AMD, clang
@memoized(None)
def clang_for(arch: str) -> str | None:
    """The first installed clang of CLANG_NAMES that compiles HIP device code for ``arch``."""
    for name in CLANG_NAMES:
        exe = shutil.which(name)
        if exe is None:
            continue
        probe = subprocess.run([exe, "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only",
                                "-nogpulib", "-S", "-o", os.devnull, os.devnull],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return exe
    return None


def clang_archs() -> tuple[str, ...]:
    """The clang targets of this machine: CLANG_ARCHS always (a missing clang is a skip), and
    each of CLANG_OPTIONAL_ARCHS that some installed clang knows."""
    return CLANG_ARCHS + tuple(a for a in CLANG_OPTIONAL_ARCHS if clang_for(a))


# Debian's HIP headers (ROCm 5.2) use what clang 22 removed: the __AMDGCN_WAVEFRONT_SIZE macro
# (amd_warp_functions.h) and the __llvm_amdgcn_rcp_f16 / _2f16 builtins (amd_hip_fp16.h).  Before
# those headers, for clang 22 and later only: the macro from the target's wave size and the two
# reciprocals as plain functions.  Our kernels use neither (common.cuh takes the wave size from
# CC_WAVE_SIZE); this only lets the old headers parse.
_NEW_CLANG_SHIM = """#if __clang_major__ >= 22
#ifndef __AMDGCN_WAVEFRONT_SIZE
#define __AMDGCN_WAVEFRONT_SIZE CC_WAVE_SIZE
#endif
typedef _Float16 cupyconv_shim_half2 __attribute__((ext_vector_type(2)));
static __attribute__((device)) inline _Float16 __llvm_amdgcn_rcp_f16(_Float16 x) {
  return (_Float16)1.0f / x;
}
static __attribute__((device)) inline cupyconv_shim_half2 __llvm_amdgcn_rcp_2f16(cupyconv_shim_half2 x) {
  return (cupyconv_shim_half2){(_Float16)1.0f / x.x, (_Float16)1.0f / x.y};
}
#endif
"""


def _clang_command(exe: str, arch: str, src: str, out: str, shim: str) -> list[str]:
    # HIPRTC's options (COMPILE_OPTIONS, the wave size) plus what HIPRTC does by itself: -O3
    # and the HIP runtime header in front (HIPRTC pre-includes it; here __HIPCC_RTC__ is not
    # defined, so common.cuh includes hip_fp16.h itself); ``shim`` (_NEW_CLANG_SHIM) before it.
    return [exe, "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "-nogpulib", "-O3",
            "-S", "--rocm-path=/usr", "-include", shim, "-include", "hip/hip_runtime.h",
            "-Wno-pass-failed", *COMPILE_OPTIONS, *arch_options(arch), src, "-o", out]


def clang_compile(code: str, name_expressions, arch: str, assembly: bool = False):
    """Compile ``code`` with clang for ``arch``, instantiating every name expression (their
    addresses are taken in a table, which makes clang emit each kernel).  Returns the lowered
    names (name expression -> mangled kernel name, in emission order: clang has no lowered-name
    query, so the check is that every instantiation became a kernel), and with ``assembly`` also
    the AMDGPU assembly text."""
    exe = clang_for(arch)
    if exe is None:
        installed = [n for n in CLANG_NAMES if shutil.which(n)]
        raise CompilerMissing(
            f"no clang that knows {arch} (installed: {', '.join(installed) or 'none'}): on "
            "Debian/Ubuntu `apt-get install --no-install-recommends clang-19` (gfx950: clang-22)")
    names = list(dict.fromkeys(name_expressions))
    table = "".join(f"  (const void*)&{ne},\n" for ne in names)
    source = (code + "\n// every instantiation of the module, so that clang emits each kernel\n"
              "__attribute__((used)) static const void* cupyconv_instances[] = {\n" + table + "};\n")
    with tempfile.TemporaryDirectory(prefix="cupyconv-clang-") as tmp:
        src, out = os.path.join(tmp, "module.hip"), os.path.join(tmp, "module.s")
        shim = os.path.join(tmp, "clang_shim.h")
        with open(src, "w") as f:
            f.write(source)
        with open(shim, "w") as f:
            f.write(_NEW_CLANG_SHIM)
        proc = subprocess.run(_clang_command(exe, arch, src, out, shim), capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{os.path.basename(exe)} error for {arch}:\n{proc.stderr}")
        with open(out) as f:
            text = f.read()
    kernels = [k["name"] for k in parse_amdgpu_metadata(text)]
    if len(kernels) < len(names):
        raise RuntimeError(f"{len(names)} instantiations but {len(kernels)} kernels emitted")
    lowered = dict(zip(names, kernels))
    return (lowered, text) if assembly else lowered


_META_ITEM = re.compile(r"^  - \.(\w+):\s*(.*?)\s*$")
_META_KEY = re.compile(r"^    \.(\w+):\s*(.*?)\s*$")


def parse_amdgpu_metadata(assembly: str) -> list[dict]:
    """The kernels of an AMDGPU assembly file's metadata (``amdhsa.kernels``), each a dict of its
    scalar fields without the leading dot: ``name``, ``vgpr_count``, ``sgpr_count``,
    ``agpr_count``, ``vgpr_spill_count``, ``sgpr_spill_count``, ``group_segment_fixed_size``
    (LDS bytes), ``private_segment_fixed_size`` (scratch bytes), ``wavefront_size``, ...
    (numbers as ints)."""
    start, end = assembly.find(".amdgpu_metadata"), assembly.find(".end_amdgpu_metadata")
    if start < 0:
        return []
    kernels, section = [], False
    for line in assembly[start:end if end > 0 else None].splitlines():
        if line.startswith("amdhsa."):
            section = line.startswith("amdhsa.kernels:")
            continue
        if not section:
            continue
        m = _META_ITEM.match(line)
        if m:
            kernels.append({})
        else:
            m = _META_KEY.match(line)
        if m and kernels and m.group(2):  # nested lists (.args) have no scalar value
            value = m.group(2)
            kernels[-1][m.group(1)] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return kernels


# --------------------------------------------------------------------------- driver
def all_modules() -> tuple:
    """REGISTRY plus the families that keep a registry of their own: cupyconv.ndimage, whose
    modules are (input, output, compute) dtype triples built on demand (its check_modules() is
    the representative set)."""
    from cupyconv._ndimage.kernels import check_modules

    return tuple(REGISTRY) + check_modules()


@memoized(None)
def _compiler_version(vendor: str, arch: str = "") -> str:
    """The compiler's version, for the result cache's key ("?" where it cannot be asked)."""
    try:
        if vendor == "nvidia":
            from cupy.cuda import nvrtc

            return "nvrtc %d.%d" % nvrtc.getVersion()
        if vendor == "clang":
            exe = clang_for(arch)
            if exe is None:
                return "?"
            return subprocess.run([exe, "--version"], capture_output=True,
                                  text=True).stdout.splitlines()[0]
        lib = _load_hiprtc()
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"hiprtc {major.value}.{minor.value}"
    except Exception:
        return "?"


def cache_root() -> Path | None:
    """The result cache's directory: ``$CUPYCONV_COMPILE_CHECK_CACHE`` (``0``/``off``/``none``
    or empty: no cache), else ``compile-check/`` in cupyconv's user cache directory (the one of
    the autotuner's ``tune.json``)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _CACHE_OFF + ("",) else Path(value).expanduser()
    from cupyconv._core.caches import user_cache_dir

    return user_cache_dir() / "compile-check"


def cache_key(vendor: str, arch: str, code: str, name_expressions) -> str:
    """sha256 of everything that changes a compile's outcome: compiler and version, target,
    options (the target's included), source text and instantiations."""
    key = json.dumps([vendor, _compiler_version(vendor, arch), arch,
                      list(COMPILE_OPTIONS + arch_options(arch)), code, list(name_expressions)])
    return hashlib.sha256(key.encode()).hexdigest()


def _cached_ok(module: KernelModule, vendor: str, arch: str) -> Path | None:
    """Where the result cache records that this exact compile succeeded (None: no cache)."""
    root = cache_root()
    if root is None:
        return None
    return root / (cache_key(vendor, arch, module.code, module.name_expressions) + ".ok")


def _record_ok(marker: Path | None) -> None:
    if marker is not None:
        with contextlib.suppress(OSError):
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()


def check_module(module: KernelModule, vendor: str, arch: str, hiprtc=None) -> CheckResult:
    """Compile one module for one target and check every instantiation got a symbol.
    ``vendor``: "nvidia" (NVRTC), "amd" (HIPRTC) or "clang" (AMD targets through clang).
    ``hiprtc``: the HIPRTC compile function (default: one subprocess for this compile).  A
    compile that already succeeded in the result cache (the same source, options, target and
    compiler) is not repeated (the result's log says "cached")."""
    compile_fn = {"nvidia": nvrtc_compile, "clang": clang_compile}.get(vendor) or (hiprtc or hiprtc_compile)
    start = time.perf_counter()
    try:
        marker = _cached_ok(module, vendor, arch)
        if marker is not None and marker.exists():
            return CheckResult(module.source, vendor, arch, "ok", time.perf_counter() - start,
                               "cached")
        lowered = compile_fn(module.code, module.name_expressions, arch)
        missing = [ne for ne in module.name_expressions if not lowered.get(ne)]
        if missing:
            raise RuntimeError(f"no symbol for {missing}")
        status, log = "ok", ""
        _record_ok(marker)
    except CompilerMissing as exc:
        status, log = "skipped", str(exc)
    except Exception as exc:
        status, log = "failed", str(exc)
    return CheckResult(module.source, vendor, arch, status, time.perf_counter() - start, log)


@dataclass(frozen=True)
class _Unit:
    """Modules sharing one source text, compiled by clang as one translation unit: quacks like
    a KernelModule (``code``, ``name_expressions``, ``source``)."""

    modules: tuple

    @property
    def code(self) -> str:
        return self.modules[0].code

    @property
    def source(self) -> str:
        return self.modules[0].source

    @property
    def name_expressions(self) -> tuple:
        return tuple(dict.fromkeys(ne for m in self.modules for ne in m.name_expressions))


def _units(modules) -> list[_Unit]:
    by_code: dict[str, list] = {}
    for m in modules:
        by_code.setdefault(m.code, []).append(m)
    return [_Unit(tuple(ms)) for ms in by_code.values()]


def _check_unit(unit: _Unit, arch: str) -> list[CheckResult]:
    """One clang compile of ``unit`` for ``arch``, reported once per module (the compile's time
    on the first)."""
    res = check_module(unit, "clang", arch)
    return [CheckResult(m.source, "clang", arch, res.status, res.seconds if i == 0 else 0.0, res.log)
            for i, m in enumerate(unit.modules)]


def targets(vendors=("nvidia", "amd", "clang")) -> list[tuple[str, str]]:
    """(vendor, arch) of every target the check compiles for, in order."""
    archs = {"nvidia": NVIDIA_ARCHS, "amd": AMD_ARCHS, "clang": clang_archs()}
    return [(v, a) for v in vendors for a in archs[v]]


def select_modules(patterns: str | None = None) -> tuple:
    """Every module (:func:`all_modules`), or those whose source matches one of the
    comma-separated fnmatch ``patterns`` (default: ``$CUPYCONV_COMPILE_CHECK_MODULES``; unset or
    empty: all)."""
    patterns = os.environ.get(MODULES_ENV, "") if patterns is None else patterns
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    modules = all_modules()
    if not pats:
        return modules
    chosen = tuple(m for m in modules if any(fnmatch.fnmatch(m.source, p) for p in pats))
    if not chosen:
        raise ValueError(f"no kernel module matches {patterns!r} (sources: "
                         f"{', '.join(sorted({m.source for m in modules}))})")
    return chosen


# --------------------------------------------------------------------------- the demo's sample
def dtype_class(dtype: str) -> str:
    """The class of a module's dtype for the sample: each float type is its own (float16 and
    bfloat16 take different code paths: intrinsics, tensor-core instructions, AMD's bfloat16
    struct), complex64/complex128 are "complex", the integer types "integer"; an ndimage
    "in:out:compute" triple is the classes of its parts."""
    def one(d):
        if d.startswith("complex"):
            return "complex"
        return "integer" if d.startswith(("int", "uint")) else d

    return ":".join(one(d) for d in dtype.split(":"))


@dataclass(frozen=True)
class Sample:
    """Some of a module's template instantiations, compiled from the module's own source text:
    quacks like a KernelModule (``code``, ``name_expressions``, ``source``, ``vendors``)."""

    module: KernelModule
    name_expressions: tuple

    @property
    def code(self) -> str:
        return self.module.code

    @property
    def source(self) -> str:
        return self.module.source

    @property
    def vendors(self) -> tuple:
        return self.module.vendors


def sample(modules=None) -> tuple[Sample, ...]:
    """The demo's representative subset of ``modules`` (default: :func:`select_modules`): one
    template instantiation for each (source file, kernel template, dtype class, GEMM main loop),
    compiled in the module it comes from (its defines and source text), so every kernel source
    is compiled for every dtype class it serves and every GEMM source on each of its main loops.
    Of the candidates, the first in registry order among the modules of the smallest tile (the
    cheapest to compile: a 64x64 GEMM tile compiles in about half the time of a 128x128 one).
    Chosen by this rule, so new modules join by themselves."""
    modules = select_modules() if modules is None else tuple(modules)
    chosen: dict[tuple, tuple] = {}
    for m in sorted(modules, key=lambda m: math.prod(m.tile)):  # (stable: registry order)
        for t in m.templates:
            for d in m.dtypes:
                key = (m.source, t, dtype_class(d), main_loop(m))
                if key not in chosen:
                    chosen[key] = (m, replace(m, templates=(t,), dtypes=(d,)).name_expressions[0])
    by_module: dict = {}
    for m, ne in chosen.values():
        by_module.setdefault(m, []).append(ne)
    return tuple(Sample(m, tuple(nes)) for m, nes in by_module.items())


def sample_targets() -> list[tuple[str, str]]:
    """The demo's targets: NVIDIA_ARCHS and, where an AMD compiler is installed, one AMD target:
    gfx90a with HIPRTC (the compiler ROCm runs at first use), else gfx942 with clang."""
    nvidia = [("nvidia", a) for a in NVIDIA_ARCHS]
    try:
        _load_hiprtc()
        return nvidia + [("amd", AMD_ARCHS[0])]
    except CompilerMissing:
        pass
    return nvidia + ([("clang", CLANG_ARCHS[0])] if clang_for(CLANG_ARCHS[0]) else [])


def run_check(modules=None, vendors=("nvidia", "amd", "clang"), progress=None,
              workers=None, on=None) -> list[CheckResult]:
    """Compile every module for every target of ``vendors`` (or the (vendor, arch) targets
    ``on``); ``progress(result)`` after each.

    Compiles run on ``workers`` threads (default: one per CPU; compiling is CPU-bound): NVRTC
    releases the GIL, each thread's HIPRTC compiles go, one after another, to a worker
    subprocess of its own (:class:`_HiprtcWorker`), so they overlap, and clang runs as a
    subprocess per translation unit.  Results come back in job order (target by target).
    """
    modules = select_modules() if modules is None else tuple(modules)
    jobs = []
    for vendor, arch in targets(vendors) if on is None else on:
        owner = "amd" if vendor == "clang" else vendor
        mine = [m for m in modules if owner in m.vendors]
        if vendor == "clang":
            jobs += [(u, vendor, arch) for u in _units(mine)]
        else:
            jobs += [(m, vendor, arch) for m in mine]
    results = []
    hip = _WorkerPool()

    def run(job):
        if job[1] == "clang":
            return _check_unit(job[0], job[2])
        return [check_module(*job, hiprtc=hip.compile)]

    try:
        with ThreadPoolExecutor(max_workers=workers or _cpu_count()) as pool:
            for batch in pool.map(run, jobs):
                for res in batch:
                    results.append(res)
                    if progress is not None:
                        progress(res)
    finally:
        hip.close()
    return results


def _cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def require_compilers() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def summarize(results) -> tuple[bool, str]:
    """(passed, one-line summary).  Skips fail too when ``CUPYCONV_REQUIRE_COMPILERS`` is set."""
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "failed", "skipped")}
    cached = sum(r.log == "cached" for r in results)
    passed = counts["failed"] == 0 and not (require_compilers() and counts["skipped"])
    line = (f"compile check: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"
            f" ({len(results)} module x target compiles, {cached} from the cache)")
    return passed, line


_COMPILER = {"nvidia": "NVRTC", "amd": "HIPRTC", "clang": "clang"}


def target_line(vendor: str, arch: str, results) -> str:
    """One line for one target: counts, how many came from the cache, compile time."""
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "failed", "skipped")}
    cached = sum(r.log == "cached" for r in results)
    return (f"  {arch:8s} {_COMPILER[vendor]:6s}  {counts['ok']:4d} ok  {counts['failed']:3d} failed"
            f"  {counts['skipped']:4d} skipped  ({cached} cached, "
            f"{sum(r.seconds for r in results):.1f} s compiling)")


def family_line(vendor: str, arch: str, family: str, results) -> str:
    """One line for one kernel family (a kernel_src/ folder) on one target: the demo's progress."""
    failed = sum(r.status == "failed" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    ok = len(results) - failed - skipped
    sources = sorted({r.source.split("/", 1)[-1] for r in results})
    extra = (f"  {failed} FAILED" if failed else "") + (f"  {skipped} skipped" if skipped else "")
    return (f"  {arch:8s} {_COMPILER[vendor]:6s}  {family:10s} {ok:3d} ok{extra}  "
            f"({sum(r.seconds for r in results):5.1f} s: {', '.join(sources)})")


def _family(r) -> str:
    return r.source.split("/", 1)[0]


class _Printer:
    """Streams the check's output: one line per group of results (a target; for the demo's
    sample a target's kernel family) once its last result is in, each failure with its log,
    and each distinct skip reason once (not once per module)."""

    def __init__(self, out, plan, by_family: bool = False):
        self.out, self.left = out, {t: n for t, n in plan}
        self.by_family = by_family
        self.done: dict = {}
        self.hints: list[str] = []

    def __call__(self, r: CheckResult):
        key = (r.vendor, r.arch) + ((_family(r),) if self.by_family else ())
        self.done.setdefault(key, []).append(r)
        if r.status == "failed":
            print(f"  FAILED  {r.arch} {r.source}:\n    "
                  + r.log.strip().replace("\n", "\n    ")[:4000], file=self.out, flush=True)
        if r.status == "skipped" and r.log not in self.hints:
            self.hints.append(r.log)
        self.left[key] -= 1
        if self.left[key] == 0:
            line = family_line if self.by_family else target_line
            print(line(*key, self.done[key]), file=self.out, flush=True)


def _plan(modules, on, by_family: bool = False) -> list[tuple[tuple, int]]:
    """(target, or (vendor, arch, family) with ``by_family``; the number of results it will
    report), in job order; groups with none left out."""
    plan: dict = {}
    for v, a in on:
        for m in modules:
            if ("amd" if v == "clang" else v) in m.vendors:
                key = (v, a) + ((_family(m),) if by_family else ())
                plan[key] = plan.get(key, 0) + 1
    return list(plan.items())


def main(out=None, modules=None, use_cache: bool = True) -> int:
    """Run the check with one line per target and a summary; exit status 0 when it passed.
    ``modules``: fnmatch patterns of sources (default: ``$CUPYCONV_COMPILE_CHECK_MODULES``, or
    all); ``use_cache=False``: compile everything, record nothing."""
    out = sys.stdout if out is None else out
    if not use_cache:
        os.environ[CACHE_ENV] = "off"
    chosen = select_modules(modules)
    vendors = ("nvidia", "amd", "clang")
    plan = _plan(chosen, targets(vendors))
    clang_targets = [a for (v, a), _ in plan if v == "clang"]
    root = cache_root()
    print(f"compiling {len(chosen)} kernel modules for NVIDIA {', '.join(NVIDIA_ARCHS)} (NVRTC), "
          f"AMD {', '.join(AMD_ARCHS)} (HIPRTC) and {', '.join(clang_targets)} (clang)\n"
          f"result cache: {root if root else 'off'}", file=out, flush=True)
    for arch in CLANG_OPTIONAL_ARCHS:
        if arch not in clang_targets:
            print(f"  {arch:8s} not checked: no installed clang knows it "
                  f"(clang-19 does not; Debian's clang-22 does)", file=out)
    printer = _Printer(out, plan)
    results = run_check(chosen, vendors, progress=printer)
    for hint in printer.hints:
        n = sum(r.log == hint for r in results)
        print(f"  skipped {n} compiles: " + hint.strip().replace("\n", "\n    "), file=out)
    passed, line = summarize(results)
    print(line + ("" if passed else "  -> FAILED"), file=out)
    return 0 if passed else 1


FULL_CHECK = "python3 -m cupyconv compile-check"
_AMD_HINT = ("AMD not checked: no HIPRTC or clang here (Debian/Ubuntu: `apt-get install "
             "--no-install-recommends hipcc libamdhip64-dev` or `clang-19`)")


def sample_main(out=None, modules=None) -> int:
    """The demo's compile check: :func:`sample` (of ``modules``, fnmatch patterns as for
    :func:`main`) for :func:`sample_targets`, one progress line per kernel family and target, a
    summary and how to run the full check.  Exit status 0 when it passed."""
    out = sys.stdout if out is None else out
    modules = select_modules(modules)
    chosen = sorted(sample(modules), key=_family)  # (stable) family by family: progress lines
    on = sample_targets()
    root = cache_root()
    names = sum(len(s.name_expressions) for s in chosen)
    full = sum(len(m.name_expressions) for m in modules)
    compilers = ", ".join(f"{a} ({_COMPILER[v]})" for v, a in on)
    print(f"compiling a representative sample of the kernels: {names} of their {full} template "
          f"instantiations, one per kernel source, kernel, dtype class and GEMM main loop, from "
          f"{len(chosen)} of the {len(modules)} kernel modules, for {compilers}\n"
          f"result cache: {root if root else 'off'}", file=out, flush=True)
    if not any(v in ("amd", "clang") for v, _ in on):
        print("  " + _AMD_HINT, file=out)
    printer = _Printer(out, _plan(chosen, on, by_family=True), by_family=True)
    results = run_check(chosen, progress=printer, on=on)
    for hint in printer.hints:
        n = sum(r.log == hint for r in results)
        print(f"  skipped {n} compiles: " + hint.strip().replace("\n", "\n    "), file=out)
    passed, line = summarize(results)
    print(line + ("" if passed else "  -> FAILED"), file=out)
    print(f"That was a sample.  Every kernel module for every target (NVIDIA "
          f"{', '.join(NVIDIA_ARCHS)}; AMD {', '.join(AMD_ARCHS)} with HIPRTC and "
          f"{', '.join(CLANG_ARCHS)} with clang, where installed), as CI runs it: {FULL_CHECK}",
          file=out)
    return 0 if passed else 1


# --------------------------------------------------------------------------- resource report
_REPORT_FIELDS = (("VGPR", "vgpr_count"), ("AGPR", "agpr_count"), ("SGPR", "sgpr_count"),
                  ("LDS B", "group_segment_fixed_size"), ("scratch B", "private_segment_fixed_size"),
                  ("VGPR spill", "vgpr_spill_count"), ("SGPR spill", "sgpr_spill_count"),
                  ("wave", "wavefront_size"))


def resource_report(modules=None, archs=REPORT_ARCHS, workers=None) -> list[dict]:
    """Per kernel and target: registers, LDS, scratch and spills from clang's AMDGPU metadata
    (one compile per source text and target; the rows are cached like the check's results).
    Each row: ``arch``, ``source``, ``kernel`` (the name expression), the metadata fields."""
    modules = select_modules() if modules is None else tuple(modules)
    units = _units([m for m in modules if "amd" in m.vendors])

    def one(job):
        unit, arch = job
        root = cache_root()
        path = None if root is None else root / (
            cache_key("clang", arch, unit.code, unit.name_expressions) + ".report.json")
        if path is not None and path.exists():
            with contextlib.suppress(OSError, ValueError):
                return json.loads(path.read_text())
        lowered, text = clang_compile(unit.code, unit.name_expressions, arch, assembly=True)
        by_name = {k["name"]: k for k in parse_amdgpu_metadata(text)}
        rows = [dict(arch=arch, source=unit.source, kernel=ne,
                     **{f: by_name.get(sym, {}).get(f) for _, f in _REPORT_FIELDS})
                for ne, sym in lowered.items()]
        if path is not None:
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(rows))
        return rows

    jobs = [(u, a) for a in archs for u in units]
    with ThreadPoolExecutor(max_workers=workers or _cpu_count()) as pool:
        return [row for rows in pool.map(one, jobs) for row in rows]


def report_main(out=None, modules=None) -> int:
    """Print the resource report (``compile-check --report``); 0, or 1 when clang is missing or
    a compile fails."""
    out = sys.stdout if out is None else out
    print(f"per-kernel resources from clang's AMDGPU metadata for {', '.join(REPORT_ARCHS)} "
          f"(-O3; LDS and scratch in bytes per workgroup / lane)", file=out, flush=True)
    try:
        rows = resource_report(select_modules(modules))
    except (CompilerMissing, RuntimeError) as exc:
        print(f"report failed: {exc}", file=out)
        return 1
    head = f"{'arch':7s} {'kernel':58s} " + " ".join(f"{h:>10s}" for h, _ in _REPORT_FIELDS)
    print(head + "\n" + "-" * len(head), file=out)
    for r in rows:
        name = r["kernel"] if len(r["kernel"]) <= 58 else r["kernel"][:55] + "..."
        print(f"{r['arch']:7s} {name:58s} "
              + " ".join(f"{'-' if r[f] is None else r[f]:>10}" for _, f in _REPORT_FIELDS), file=out)
    spills = [r for r in rows if (r["vgpr_spill_count"] or 0) + (r["sgpr_spill_count"] or 0)]
    print(f"{len(rows)} kernels; {len(spills)} with spills", file=out)
    return 0


def _worker() -> int:
    """Compile requests (one JSON line each) from stdin until it closes; answer each with one
    JSON line, ``{"lowered": {...}}`` or ``{"error": "..."}``.  The answers go to a private copy
    of stdout: the compiler's own output on fd 1 is sent to stderr so it cannot garble them."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            reply = {"lowered": _hiprtc_compile_in_process(req["code"], req["names"], req["arch"])}
        except Exception as exc:
            reply = {"error": str(exc)}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__" and sys.argv[1:] == ["--hiprtc-worker"]:
    sys.exit(_worker())
