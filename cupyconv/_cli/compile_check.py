"""GPU-free compile check: every registered kernel module, built for NVIDIA and AMD targets.

NVRTC is reached through CuPy's program wrapper (the same option assembly ``cupy.RawModule`` uses),
compiling to cubin so that ptxas runs too.  HIPRTC is called through ctypes from ``libamdhip64``
(Debian's ROCm ships it there), in worker subprocesses because comgr can abort the whole process
on some targets (a worker compiles many modules in turn; a compile that kills its worker is
retried alone, to name it).  Neither path touches a GPU.

A missing compiler is reported as ``skipped``; with ``CUPYCONV_REQUIRE_COMPILERS=1`` it is a failure,
which is how CI makes sure the check really ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cupyconv._core.caches import memoized
from cupyconv._core.kernels import REGISTRY, KernelModule
from cupyconv.jit import COMPILE_OPTIONS

NVIDIA_ARCHS = ("sm_80", "sm_90a")  # sm_90a: what the JIT compiles for on Hopper (jit.arch_options)
AMD_ARCHS = ("gfx90a", "gfx908", "gfx1030")
REQUIRE_ENV = "CUPYCONV_REQUIRE_COMPILERS"
# A directory recording successful compiles, so that one test session compiles each module for
# each target once (the compile check test and the demo's both run it); unset: no cache.
CACHE_ENV = "CUPYCONV_COMPILE_CHECK_CACHE"
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


# --------------------------------------------------------------------------- driver
def all_modules() -> tuple:
    """REGISTRY plus the families that keep a registry of their own: cupyconv.ndimage, whose
    modules are (input, output, compute) dtype triples built on demand (its check_modules() is
    the representative set)."""
    from cupyconv._ndimage.kernels import check_modules

    return tuple(REGISTRY) + check_modules()


@memoized(None)
def _compiler_version(vendor: str) -> str:
    """The compiler's version, for the result cache's key ("?" where it cannot be asked)."""
    try:
        if vendor == "nvidia":
            from cupy.cuda import nvrtc

            return "nvrtc %d.%d" % nvrtc.getVersion()
        lib = _load_hiprtc()
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"hiprtc {major.value}.{minor.value}"
    except Exception:
        return "?"


def _cached_ok(module: KernelModule, vendor: str, arch: str) -> Path | None:
    """Where the check's result cache (``$CUPYCONV_COMPILE_CHECK_CACHE``, unset: none) records
    that this exact compile succeeded: the file name hashes everything that changes the outcome
    (vendor, compiler version, target, options, source text, instantiations)."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        return None
    key = json.dumps([vendor, _compiler_version(vendor), arch, COMPILE_OPTIONS, module.code,
                      module.name_expressions])
    return Path(root) / (hashlib.sha256(key.encode()).hexdigest() + ".ok")


def check_module(module: KernelModule, vendor: str, arch: str, hiprtc=None) -> CheckResult:
    """Compile one module for one target and check every instantiation got a symbol.
    ``hiprtc``: the HIPRTC compile function (default: one subprocess for this compile).  With
    ``$CUPYCONV_COMPILE_CHECK_CACHE`` set, a compile that already succeeded there (the same
    source, options, target and compiler) is not repeated (the result says "cached")."""
    compile_fn = nvrtc_compile if vendor == "nvidia" else (hiprtc or hiprtc_compile)
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
        if marker is not None:
            with contextlib.suppress(OSError):
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
    except CompilerMissing as exc:
        status, log = "skipped", str(exc)
    except Exception as exc:
        status, log = "failed", str(exc)
    return CheckResult(module.source, vendor, arch, status, time.perf_counter() - start, log)


def run_check(modules=None, vendors=("nvidia", "amd"), progress=None, workers=None) -> list[CheckResult]:
    """Compile every module for every target of ``vendors``; ``progress(result)`` after each.

    Compiles run on ``workers`` threads (default: one per CPU; compiling is CPU-bound): NVRTC
    releases the GIL, and each thread's HIPRTC compiles go, one after another, to a worker
    subprocess of its own (:class:`_HiprtcWorker`), so they overlap.  Results come back in job
    order.
    """
    modules = REGISTRY if modules is None else tuple(modules)
    archs = {"nvidia": NVIDIA_ARCHS, "amd": AMD_ARCHS}
    jobs = [(m, vendor, arch) for vendor in vendors for arch in archs[vendor] for m in modules
            if vendor in m.vendors]
    results = []
    hip = _WorkerPool()
    try:
        with ThreadPoolExecutor(max_workers=workers or _cpu_count()) as pool:
            for res in pool.map(lambda job: check_module(*job, hiprtc=hip.compile), jobs):
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
    passed = counts["failed"] == 0 and not (require_compilers() and counts["skipped"])
    line = (f"compile check: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"
            f" ({len(results)} module x target compiles)")
    return passed, line


def main(out=None) -> int:
    """Run the check with one progress line per compile; exit status 0 when it passed."""
    out = sys.stdout if out is None else out

    def show(r: CheckResult):
        print(f"  {r.status:7s} {r.vendor:6s} {r.arch:8s} {r.source:24s} {r.seconds:6.2f} s"
              + (" (cached)" if r.log == "cached" else ""), file=out, flush=True)
        if r.status != "ok":
            print("    " + r.log.strip().replace("\n", "\n    ")[:4000], file=out)

    modules = all_modules()
    print(f"compiling {len(modules)} kernel modules for NVIDIA {', '.join(NVIDIA_ARCHS)} "
          f"(NVRTC) and AMD {', '.join(AMD_ARCHS)} (HIPRTC)", file=out, flush=True)
    results = run_check(modules, progress=show)
    passed, line = summarize(results)
    print(line + ("" if passed else "  -> FAILED"), file=out)
    return 0 if passed else 1


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
