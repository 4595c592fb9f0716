"""The compile check's compilers and targets, none of which touches a GPU.

NVRTC is reached through CuPy's program wrapper (the same option assembly ``cupy.RawModule`` uses),
compiling to cubin so that ptxas runs too.  HIPRTC is called through ctypes from ``libamdhip64``
(Debian's ROCm ships it there), in worker subprocesses because comgr can abort the whole process
on some targets (a worker compiles many modules in turn; a compile that kills its worker is
retried alone, to name it).  Debian 12's HIPRTC is ROCm 5.2: it knows gfx908/gfx90a/gfx1030 and
crashes on newer targets, so gfx942 (MI300), gfx1100 (RDNA3), gfx1201 (RDNA4) and, where the
installed clang knows it, gfx950 (MI355) are compiled by clang (``clang-19 -x hip
--cuda-device-only -nogpulib -O3 -S``) from the same source with the same options and the same
wave-size define.  :func:`parse_amdgpu_metadata` reads the resources clang reports per kernel.

The driver is :mod:`cupyconv._cli.compile_check`; this module is also the HIPRTC worker
(``python -m cupyconv._cli.compilers --hiprtc-worker``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

from cupyconv._core.caches import memoized
from cupyconv._core.jit import arch_options
from cupyconv.jit import COMPILE_OPTIONS

NVIDIA_ARCHS = ("sm_80", "sm_90a")  # sm_90a: what the JIT compiles for on Hopper (jit.arch_options)
AMD_ARCHS = ("gfx90a", "gfx908", "gfx1030")  # HIPRTC (Debian 12: ROCm 5.2)
# clang -x hip: targets Debian's HIPRTC cannot compile.  gfx950 only where an installed clang
# knows it (clang-19 does not; Debian's clang-22 does).
CLANG_ARCHS = ("gfx942", "gfx1100", "gfx1201")
CLANG_OPTIONAL_ARCHS = ("gfx950",)
CLANG_NAMES = ("clang-19", "clang-20", "clang-21", "clang-22", "clang")
_HIP_LIBS = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")


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


_WORKER_CMD = [sys.executable, "-m", "cupyconv._cli.compilers", "--hiprtc-worker"]


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
