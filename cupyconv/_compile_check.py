"""GPU-free compile check: every registered kernel module, built for NVIDIA and AMD targets.

NVRTC is reached through CuPy's program wrapper (the same option assembly ``cupy.RawModule`` uses),
compiling to cubin so that ptxas runs too.  HIPRTC is called through ctypes from ``libamdhip64``
(Debian's ROCm ships it there), one subprocess per compile because comgr can abort the whole process
on some targets.  Neither path touches a GPU.

A missing compiler is reported as ``skipped``; with ``CUPYCONV_REQUIRE_COMPILERS=1`` it is a failure,
which is how CI makes sure the check really ran.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ._kernels import REGISTRY, KernelModule
from .jit import COMPILE_OPTIONS

NVIDIA_ARCHS = ("sm_80", "sm_90")
AMD_ARCHS = ("gfx90a", "gfx908", "gfx1030")
REQUIRE_ENV = "CUPYCONV_REQUIRE_COMPILERS"
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


def hiprtc_compile(code: str, name_expressions, arch: str, timeout: float = 300) -> dict:
    """Compile ``code`` with HIPRTC for ``arch`` in a subprocess; return the lowered names."""
    _load_hiprtc()  # fail fast, in this process, when the library is absent
    request = json.dumps({"code": code, "names": list(name_expressions), "arch": arch})
    proc = subprocess.run([sys.executable, "-m", "cupyconv._compile_check", "--hiprtc-worker"],
                          input=request, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"HIPRTC worker died with code {proc.returncode}")
    return json.loads(proc.stdout)


# --------------------------------------------------------------------------- driver
def check_module(module: KernelModule, vendor: str, arch: str) -> CheckResult:
    """Compile one module for one target and check every instantiation got a symbol."""
    compile_fn = nvrtc_compile if vendor == "nvidia" else hiprtc_compile
    start = time.perf_counter()
    try:
        lowered = compile_fn(module.code, module.name_expressions, arch)
        missing = [ne for ne in module.name_expressions if not lowered.get(ne)]
        if missing:
            raise RuntimeError(f"no symbol for {missing}")
        status, log = "ok", ""
    except CompilerMissing as exc:
        status, log = "skipped", str(exc)
    except Exception as exc:
        status, log = "failed", str(exc)
    return CheckResult(module.source, vendor, arch, status, time.perf_counter() - start, log)


def run_check(modules=None, vendors=("nvidia", "amd"), progress=None, workers=None) -> list[CheckResult]:
    """Compile every module for every target of ``vendors``; ``progress(result)`` after each.

    Compiles run on ``workers`` threads (default: one per CPU): HIPRTC runs in subprocesses and
    NVRTC releases the GIL, so they overlap.  Results come back in job order.
    """
    modules = REGISTRY if modules is None else tuple(modules)
    archs = {"nvidia": NVIDIA_ARCHS, "amd": AMD_ARCHS}
    jobs = [(m, vendor, arch) for vendor in vendors for arch in archs[vendor] for m in modules]
    results = []
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for res in pool.map(lambda job: check_module(*job), jobs):
            results.append(res)
            if progress is not None:
                progress(res)
    return results


def require_compilers() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def summarize(results) -> tuple[bool, str]:
    """(passed, one-line summary).  Skips fail too when ``CUPYCONV_REQUIRE_COMPILERS`` is set."""
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "failed", "skipped")}
    passed = counts["failed"] == 0 and not (require_compilers() and counts["skipped"])
    line = (f"compile check: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"
            f" ({len(results)} module x target compiles)")
    return passed, line


def main(out=None) -> int:
    """Run the check with one progress line per compile; exit status 0 when it passed."""
    out = sys.stdout if out is None else out

    def show(r: CheckResult):
        print(f"  {r.status:7s} {r.vendor:6s} {r.arch:8s} {r.source:24s} {r.seconds:6.2f} s", file=out,
              flush=True)
        if r.status != "ok":
            print("    " + r.log.strip().replace("\n", "\n    ")[:4000], file=out)

    print(f"compiling {len(REGISTRY)} kernel modules for NVIDIA {', '.join(NVIDIA_ARCHS)} "
          f"(NVRTC) and AMD {', '.join(AMD_ARCHS)} (HIPRTC)", file=out, flush=True)
    results = run_check(progress=show)
    passed, line = summarize(results)
    print(line + ("" if passed else "  -> FAILED"), file=out)
    return 0 if passed else 1


def _worker() -> int:
    req = json.loads(sys.stdin.read())
    try:
        lowered = _hiprtc_compile_in_process(req["code"], req["names"], req["arch"])
    except Exception as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps(lowered))
    return 0


if __name__ == "__main__" and sys.argv[1:] == ["--hiprtc-worker"]:
    sys.exit(_worker())
