"""GPU-free compile check: every registered kernel module, built for NVIDIA and AMD targets.

This is the driver (which modules for which targets, compiled in parallel, and the output; by
clang, the modules of one source text as one translation unit: 22 instead of 272 compiles per
target); the compilers and target lists are :mod:`cupyconv._cli.compilers`, the result cache
:mod:`cupyconv._cli.compile_cache`, ``compile-check --report`` :mod:`cupyconv._cli.amd_report`.
Every module is built for NVIDIA and the HIPRTC targets; the clang-only targets build
:func:`sample` unless ``CUPYCONV_COMPILE_CHECK_CLANG=full`` (all of it was 42 % of the CPU time).

The demo without a GPU (and ``compile-check --sample``) compiles the sample of
:mod:`cupyconv._cli.compile_sample` instead (one template instantiation per kernel source, kernel,
dtype class and GEMM main loop) for sm_80, sm_90a and one AMD target where an AMD compiler is
installed, in a minute or two on two cores.  A missing
compiler is reported as ``skipped``; with ``CUPYCONV_REQUIRE_COMPILERS=1`` it is a failure, which
is how CI makes sure the check really ran.
"""

from __future__ import annotations

import fnmatch
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from cupyconv._cli import compile_cache, compilers
from cupyconv._cli.compile_sample import sample, sample_targets
from cupyconv._core.kernels import REGISTRY, KernelModule

REQUIRE_ENV = "CUPYCONV_REQUIRE_COMPILERS"
# Comma-separated fnmatch patterns of module sources (e.g. "common/copy.cu,gemm/im2col.cu"):
# check only those (the demo without a GPU reads it too).
MODULES_ENV = "CUPYCONV_COMPILE_CHECK_MODULES"
CLANG_ENV = "CUPYCONV_COMPILE_CHECK_CLANG"  # "full": every module for the clang targets too


@dataclass
class CheckResult:
    """Outcome of compiling one module for one target: ``ok``, ``failed`` or ``skipped``."""

    source: str
    vendor: str
    arch: str
    status: str
    seconds: float = 0.0
    log: str = ""


def all_modules() -> tuple:
    """REGISTRY plus the families that keep a registry of their own: cupyconv.ndimage, whose
    modules are (input, output, compute) dtype triples built on demand (its check_modules() is
    the representative set)."""
    from cupyconv._ndimage.kernels import check_modules

    return tuple(REGISTRY) + check_modules()


def check_module(module: KernelModule, vendor: str, arch: str, hiprtc=None) -> CheckResult:
    """Compile one module for one target and check every instantiation got a symbol.
    ``vendor``: "nvidia" (NVRTC), "amd" (HIPRTC) or "clang" (AMD targets through clang).
    ``hiprtc``: the HIPRTC compile function (default: one subprocess for this compile).  A
    compile that already succeeded in the result cache (the same source, options, target and
    compiler) is not repeated (the result's log says "cached")."""
    compile_fn = ({"nvidia": compilers.nvrtc_compile, "clang": compilers.clang_compile}.get(vendor)
                  or hiprtc or compilers.hiprtc_compile)
    start = time.perf_counter()
    try:
        marker = compile_cache._cached_ok(module, vendor, arch)
        if marker is not None and marker.exists():
            return CheckResult(module.source, vendor, arch, "ok", time.perf_counter() - start,
                               "cached")
        lowered = compile_fn(module.code, module.name_expressions, arch)
        missing = [ne for ne in module.name_expressions if not lowered.get(ne)]
        if missing:
            raise RuntimeError(f"no symbol for {missing}")
        status, log = "ok", ""
        compile_cache._record_ok(marker)
    except compilers.CompilerMissing as exc:
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
    archs = {"nvidia": compilers.NVIDIA_ARCHS, "amd": compilers.AMD_ARCHS,
             "clang": compilers.clang_archs()}
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


def run_check(modules=None, vendors=("nvidia", "amd", "clang"), progress=None,
              workers=None, on=None) -> list[CheckResult]:
    """Compile every module for every target of ``vendors`` (or the (vendor, arch) targets
    ``on``); ``progress(result)`` after each.

    Compiles run on ``workers`` threads (default: one per CPU; compiling is CPU-bound): NVRTC
    releases the GIL, each thread's HIPRTC compiles go, one after another, to a worker
    subprocess of its own (``compilers._HiprtcWorker``), so they overlap, and clang runs as a
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
    hip = compilers._WorkerPool()

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
        os.environ[compile_cache.CACHE_ENV] = "off"
    chosen = select_modules(modules)
    full_clang = os.environ.get(CLANG_ENV, "") == "full"
    by_clang = chosen if full_clang else sample(chosen)
    plan = _plan(chosen, targets(("nvidia", "amd"))) + _plan(by_clang, targets(("clang",)))
    clang_targets = [a for (v, a), _ in plan if v == "clang"]
    root = compile_cache.cache_root()
    print(f"compiling {len(chosen)} kernel modules for NVIDIA "
          f"{', '.join(compilers.NVIDIA_ARCHS)} (NVRTC), "
          f"AMD {', '.join(compilers.AMD_ARCHS)} (HIPRTC) and {', '.join(clang_targets)} (clang"
          f"{'' if full_clang else f': the sample, {CLANG_ENV}=full for all'})\n"
          f"result cache: {root if root else 'off'}", file=out, flush=True)
    for arch in compilers.CLANG_OPTIONAL_ARCHS:
        if arch not in clang_targets:
            print(f"  {arch:8s} not checked: no installed clang knows it "
                  f"(clang-19 does not; Debian's clang-22 does)", file=out)
    printer = _Printer(out, plan)
    passed = _finish(out, printer, run_check(chosen, ("nvidia", "amd"), progress=printer)
                     + run_check(by_clang, ("clang",), progress=printer))
    return 0 if passed else 1


def _finish(out, printer, results) -> bool:
    """Print each distinct skip reason with its count and the summary; whether all passed."""
    for hint in printer.hints:
        n = sum(r.log == hint for r in results)
        print(f"  skipped {n} compiles: " + hint.strip().replace("\n", "\n    "), file=out)
    passed, line = summarize(results)
    print(line + ("" if passed else "  -> FAILED"), file=out)
    return passed


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
    root = compile_cache.cache_root()
    names = sum(len(s.name_expressions) for s in chosen)
    full = sum(len(m.name_expressions) for m in modules)
    on_names = ", ".join(f"{a} ({_COMPILER[v]})" for v, a in on)
    print(f"compiling a representative sample of the kernels: {names} of their {full} template "
          f"instantiations, one per kernel source, kernel, dtype class and GEMM main loop, from "
          f"{len(chosen)} of the {len(modules)} kernel modules, for {on_names}\n"
          f"result cache: {root if root else 'off'}", file=out, flush=True)
    if not any(v in ("amd", "clang") for v, _ in on):
        print("  " + _AMD_HINT, file=out)
    printer = _Printer(out, _plan(chosen, on, by_family=True), by_family=True)
    passed = _finish(out, printer, run_check(chosen, progress=printer, on=on))
    print(f"That was a sample.  Every kernel module for NVIDIA {', '.join(compilers.NVIDIA_ARCHS)} "
          f"and AMD {', '.join(compilers.AMD_ARCHS)} with HIPRTC (this sample for "
          f"{', '.join(compilers.CLANG_ARCHS)} with clang, where installed), as CI runs it: "
          f"{FULL_CHECK}", file=out)
    return 0 if passed else 1
