"""Every registered kernel compiles for NVIDIA (NVRTC, cubin) and AMD (HIPRTC), without a GPU."""

from dataclasses import dataclass

import pytest

from cupyconv._cli import amd_report
from cupyconv._cli import compile_cache as cc_cache
from cupyconv._cli import compilers
from cupyconv._cli import compile_check as cc_check
from cupyconv._cli import compile_sample
from cupyconv._core.kernels import REGISTRY


def _check_vendor(vendor):
    results = cc_check.run_check(vendors=(vendor,))
    failed = [r for r in results if r.status == "failed"]
    assert not failed, "\n\n".join(f"{r.source} {r.arch}:\n{r.log}" for r in failed)
    skipped = [r for r in results if r.status == "skipped"]
    if skipped:
        if cc_check.require_compilers():
            pytest.fail(f"{vendor} compiler missing but {cc_check.REQUIRE_ENV} is set: {skipped[0].log}")
        pytest.skip(f"{vendor} compiler missing: {skipped[0].log}")
    archs = compilers.NVIDIA_ARCHS if vendor == "nvidia" else compilers.AMD_ARCHS
    assert len(results) == sum(vendor in m.vendors for m in cc_check.all_modules()) * len(archs)
    assert all(r.status == "ok" for r in results)


def test_every_kernel_compiles_with_nvrtc():
    _check_vendor("nvidia")


def test_every_kernel_compiles_with_hiprtc():
    _check_vendor("amd")


@dataclass(frozen=True)
class FakeModule:
    """Quacks like KernelModule, with source text of our choosing."""
    code: str
    source: str = "broken.cu"
    name_expressions: tuple = ("k<float>",)
    vendors: tuple = ("nvidia", "amd")


BROKEN_BODY = """
template <typename T> __global__ void k(T* y) { y[threadIdx.x] = undeclared_name + 1; }
"""
VALID_BODY = """
template <typename T> __global__ void k(T* y) { y[threadIdx.x] = cc::store_as<T>(1.0f); }
"""


def _module(body):
    from cupyconv._core.kernel_module import load_source

    return FakeModule(load_source("common/common.cuh") + body)


@pytest.mark.parametrize("vendor,arch", [("nvidia", "sm_90"), ("amd", "gfx90a")])
def test_check_fails_on_a_broken_kernel(vendor, arch):
    res = cc_check.check_module(_module(BROKEN_BODY), vendor, arch)
    if res.status == "skipped" and not cc_check.require_compilers():
        pytest.skip(res.log)
    assert res.status == "failed"
    assert "undeclared_name" in res.log
    ok = cc_check.check_module(_module(VALID_BODY), vendor, arch)
    assert ok.status == "ok", ok.log


def test_main_reports_failure(monkeypatch, capsys):
    monkeypatch.setattr(cc_check, "all_modules", lambda: (_module(BROKEN_BODY),))
    monkeypatch.setenv(cc_check.CLANG_ENV, "full")  # (stand-ins have no tiles to sample by)
    monkeypatch.setattr(compilers, "NVIDIA_ARCHS", ("sm_90",))
    monkeypatch.setattr(compilers, "AMD_ARCHS", ("gfx90a",))
    monkeypatch.setattr(compilers, "CLANG_ARCHS", ("gfx942",))
    monkeypatch.setattr(compilers, "CLANG_OPTIONAL_ARCHS", ())
    assert cc_check.main() == 1
    assert "FAILED" in capsys.readouterr().out


def test_missing_compiler_is_a_failure_when_required(monkeypatch):
    skipped = [cc_check.CheckResult("x.cu", "amd", "gfx90a", "skipped", log="no HIPRTC")]
    monkeypatch.delenv(cc_check.REQUIRE_ENV, raising=False)
    assert cc_check.summarize(skipped)[0] is True
    monkeypatch.setenv(cc_check.REQUIRE_ENV, "1")
    assert cc_check.summarize(skipped)[0] is False


# A stand-in for the HIPRTC worker: answers every request, but dies (like a comgr abort) on a
# source containing ABORT; it reports each start in $FAKE_WORKER_LOG.
_FAKE_WORKER = r"""
import json, os, sys
with open(os.environ["FAKE_WORKER_LOG"], "a") as f:
    f.write("start\n")
for line in sys.stdin:
    req = json.loads(line)
    if "ABORT" in req["code"]:
        sys.stderr.write("comgr: fatal error in " + req["arch"] + "\n")
        sys.stderr.flush()
        os.abort()
    print(json.dumps({"lowered": {n: "sym_" + n for n in req["names"]}}), flush=True)
"""


def test_hiprtc_workers_compile_many_and_an_abort_names_its_module(monkeypatch, tmp_path):
    import sys

    log = tmp_path / "starts"
    monkeypatch.setenv("FAKE_WORKER_LOG", str(log))
    monkeypatch.setenv(cc_cache.CACHE_ENV, "off")
    monkeypatch.setattr(compilers, "_WORKER_CMD", [sys.executable, "-c", _FAKE_WORKER])
    monkeypatch.setattr(compilers, "_load_hiprtc", lambda: None)
    monkeypatch.setattr(compilers, "AMD_ARCHS", ("gfx90a", "gfx1030"))
    mods = [FakeModule(f"// module {i}\n", source=f"m{i}.cu") for i in range(8)]
    mods[3] = FakeModule("// ABORT\n", source="abort.cu")
    results = cc_check.run_check(mods, vendors=("amd",), workers=2)
    assert [(r.source, r.arch) for r in results] == [(m.source, a) for a in ("gfx90a", "gfx1030")
                                                     for m in mods]
    failed = [r for r in results if r.status == "failed"]
    assert [(r.source, r.arch) for r in failed] == [("abort.cu", "gfx90a"), ("abort.cu", "gfx1030")]
    assert all("comgr: fatal error in " + r.arch in r.log for r in failed)  # the retry's own log
    assert all(r.status == "ok" for r in results if r.source != "abort.cu")
    # 2 threads' workers + 2 lone retries + 2 fresh workers after the aborts, not one per compile
    assert len(log.read_text().split()) <= 6 < len(results)


def test_the_session_cache_skips_a_repeated_successful_compile(monkeypatch, tmp_path):
    import sys

    log = tmp_path / "starts"
    monkeypatch.setenv("FAKE_WORKER_LOG", str(log))
    monkeypatch.setenv(cc_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(compilers, "_WORKER_CMD", [sys.executable, "-c", _FAKE_WORKER])
    monkeypatch.setattr(compilers, "_load_hiprtc", lambda: None)
    good, bad = FakeModule("// good\n", source="good.cu"), FakeModule("// ABORT\n", source="bad.cu")
    first = [cc_check.check_module(m, "amd", "gfx90a") for m in (good, bad)]
    assert [r.status for r in first] == ["ok", "failed"] and first[0].log == ""
    again = [cc_check.check_module(m, "amd", "gfx90a") for m in (good, bad)]
    assert [r.status for r in again] == ["ok", "failed"] and again[0].log == "cached"
    # a different target, source or instantiation is compiled anew
    other = cc_check.check_module(good, "amd", "gfx908")
    changed = cc_check.check_module(FakeModule("// good\n", "good.cu", ("k<double>",)), "amd",
                                    "gfx90a")
    assert other.log == "" and changed.log == ""
    assert len(log.read_text().split()) == 5  # failures are never cached



# --------------------------------------------------------------------------- clang targets
def _require_or_skip(res):
    if res.status == "skipped":
        if cc_check.require_compilers():
            pytest.fail(f"compiler missing but {cc_check.REQUIRE_ENV} is set: {res.log}")
        pytest.skip(res.log)


@pytest.mark.parametrize("arch", compilers.CLANG_ARCHS + compilers.CLANG_OPTIONAL_ARCHS)
@pytest.mark.parametrize("source", ["common/copy.cu", "direct/direct_conv.cu"])
def test_clang_compiles_kernel_modules_for_the_new_amd_targets(monkeypatch, arch, source):
    """A kernel module per target HIPRTC cannot compile here (the full set: compile-check)."""
    if arch in compilers.CLANG_OPTIONAL_ARCHS and compilers.clang_for(arch) is None:
        pytest.skip(f"no installed clang knows {arch} (optional target)")
    monkeypatch.setenv(cc_cache.CACHE_ENV, "off")
    (module,) = [m for m in REGISTRY if m.source == source][:1]
    res = cc_check.check_module(module, "clang", arch)
    _require_or_skip(res)
    assert res.status == "ok", res.log


@pytest.mark.parametrize("vendor,arch", [("clang", "gfx942"), ("clang", "gfx1100"),
                                         ("clang", "gfx1201"), ("amd", "gfx90a"),
                                         ("amd", "gfx1030")])
def test_the_kernels_see_the_wave_size_of_their_target(monkeypatch, vendor, arch):
    """common.cuh's CC_WARP_SIZE is what the host passes for the target: 64 on CDNA, 32 on RDNA."""
    from cupyconv._core.jit import wave_size

    monkeypatch.setenv(cc_cache.CACHE_ENV, "off")
    body = (f"\nstatic_assert(CC_WARP_SIZE == {wave_size(arch)}, \"wave size\");\n"
            "template <typename T> __global__ void k(T* y) { y[threadIdx.x] = CC_WARP_SIZE; }\n")
    res = cc_check.check_module(_module(body), vendor, arch)
    _require_or_skip(res)
    assert res.status == "ok", res.log
    wrong = body.replace(f"== {wave_size(arch)}", f"== {96 - wave_size(arch)}")
    assert cc_check.check_module(_module(wrong), vendor, arch).status == "failed"


def test_wave_size_from_the_target_name():
    from cupyconv._core.jit import arch_options, wave_size

    assert [wave_size(a) for a in ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx90a:sramecc+:xnack-")] \
        == [64] * 5
    assert [wave_size(a) for a in ("gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201")] == [32] * 5
    assert wave_size("sm_90a") == 32
    assert arch_options("gfx942") == ("-DCC_WAVE_SIZE=64",)
    assert arch_options("gfx1201") == ("-DCC_WAVE_SIZE=32",)
    assert arch_options("sm_80") == ()
    with pytest.raises(ValueError, match="unknown GPU target"):
        wave_size("mi300")


# --------------------------------------------------------------------------- result cache
def test_the_cache_lives_in_the_user_cache_dir_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv(cc_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "user"))
    assert cc_cache.cache_root() == tmp_path / "user" / "compile-check"
    for off in ("off", "0", "none", ""):
        monkeypatch.setenv(cc_cache.CACHE_ENV, off)
        assert cc_cache.cache_root() is None
    monkeypatch.setenv(cc_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert cc_cache.cache_root() == tmp_path / "mine"


def test_cache_key_covers_compiler_target_options_source_and_instantiations(monkeypatch):
    monkeypatch.setattr(cc_cache, "_compiler_version", lambda vendor, arch="": f"{vendor} 1.0")
    base = cc_cache.cache_key("clang", "gfx942", "code", ["k<float>"])
    assert len(base) == 64 and base == cc_cache.cache_key("clang", "gfx942", "code", ["k<float>"])
    others = [cc_cache.cache_key("amd", "gfx942", "code", ["k<float>"]),
              cc_cache.cache_key("clang", "gfx1100", "code", ["k<float>"]),
              cc_cache.cache_key("clang", "gfx942", "code2", ["k<float>"]),
              cc_cache.cache_key("clang", "gfx942", "code", ["k<double>"])]
    assert len({base, *others}) == 5
    monkeypatch.setattr(cc_cache, "_compiler_version", lambda vendor, arch="": f"{vendor} 2.0")
    assert cc_cache.cache_key("clang", "gfx942", "code", ["k<float>"]) != base


def test_a_cached_compile_is_not_repeated(monkeypatch, tmp_path):
    calls = []

    def fake_clang(code, names, arch, assembly=False):
        calls.append(arch)
        return {n: "_Z1kIfEvPT_" for n in names}

    monkeypatch.setenv(cc_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(compilers, "clang_compile", fake_clang)
    monkeypatch.setattr(cc_cache, "_compiler_version", lambda vendor, arch="": "fake 1")
    mod = FakeModule("// any\n", "x.cu")
    first = cc_check.check_module(mod, "clang", "gfx942")
    again = cc_check.check_module(mod, "clang", "gfx942")
    assert (first.status, first.log, again.status, again.log) == ("ok", "", "ok", "cached")
    assert calls == ["gfx942"] and len(list(tmp_path.glob("*.ok"))) == 1


# --------------------------------------------------------------------------- output
def test_output_is_one_line_per_target_and_each_hint_once(monkeypatch):
    import io

    hint = "HIPRTC (libamdhip64) not found: install it"

    def fake(module, vendor, arch, hiprtc=None):
        status = "skipped" if vendor == "amd" else "ok"
        return cc_check.CheckResult(module.source, vendor, arch, status, 0.01,
                                    hint if status == "skipped" else "")

    mods = tuple(FakeModule(f"// {i}\n", source=f"m{i}.cu") for i in range(40))
    monkeypatch.setattr(cc_check, "all_modules", lambda: mods)
    monkeypatch.setenv(cc_check.CLANG_ENV, "full")  # (stand-ins have no tiles to sample by)
    monkeypatch.setattr(cc_check, "check_module", fake)
    monkeypatch.setattr(compilers, "CLANG_OPTIONAL_ARCHS", ())
    monkeypatch.delenv(cc_check.MODULES_ENV, raising=False)
    monkeypatch.delenv(cc_check.REQUIRE_ENV, raising=False)
    out = io.StringIO()
    assert cc_check.main(out=out) == 0
    lines = out.getvalue().splitlines()
    n_targets = len(cc_check.targets())
    assert len(lines) <= n_targets + 5, lines
    assert sum(hint in line for line in lines) == 1
    assert f"skipped {40 * len(compilers.AMD_ARCHS)} compiles" in out.getvalue()
    for arch in compilers.AMD_ARCHS + compilers.CLANG_ARCHS + compilers.NVIDIA_ARCHS:
        assert sum(line.split()[:1] == [arch] for line in lines) == 1, arch
    assert "compile check: " in lines[-1]


def test_modules_can_be_restricted_by_pattern(monkeypatch):
    monkeypatch.delenv(cc_check.MODULES_ENV, raising=False)
    assert cc_check.select_modules() == cc_check.all_modules()
    assert set(REGISTRY) < set(cc_check.all_modules())  # (and cupyconv.ndimage's modules)
    assert {m.source for m in cc_check.select_modules("common/copy.cu")} == {"common/copy.cu"}
    monkeypatch.setenv(cc_check.MODULES_ENV, "gemm/im2*, common/copy.cu")
    assert {m.source for m in cc_check.select_modules()} == {"gemm/im2col.cu", "common/copy.cu"}
    with pytest.raises(ValueError, match="no kernel module matches"):
        cc_check.select_modules("nothing/*.cu")


# --------------------------------------------------------------------------- resource report
# Captured from `clang-19 -x hip --offload-arch=gfx942 --cuda-device-only -nogpulib -O3 -S` of
# common/copy.cu (two kernels, args abbreviated), one of them edited to show spills.
_ASM = """
	.text
; NumVgprs: 46
	.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     0
    .args:
      - .actual_access:  read_only
        .address_space:  global
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .max_flat_workgroup_size: 1024
    .name:           _Z12strided_copyI6__halfEvPKT_PS1_xxxxxxxxxxxxxxxxxxx
    .private_segment_fixed_size: 0
    .sgpr_count:     94
    .sgpr_spill_count: 0
    .symbol:         _Z12strided_copyI6__halfEvPKT_PS1_xxxxxxxxxxxxxxxxxxx.kd
    .vgpr_count:     46
    .vgpr_spill_count: 0
    .wavefront_size: 64
  - .agpr_count:     4
    .args:
      - .offset:         0
        .size:           8
        .value_kind:     by_value
    .group_segment_fixed_size: 16384
    .name:           _Z12strided_copyIfEvPKT_PS0_xxxxxxxxxxxxxxxxxxx
    .private_segment_fixed_size: 24
    .sgpr_count:     40
    .sgpr_spill_count: 2
    .vgpr_count:     128
    .vgpr_spill_count: 6
    .wavefront_size: 32
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
amdhsa.version:
  - 1
  - 2
...

	.end_amdgpu_metadata
"""


def test_report_parser_reads_registers_lds_and_spills():
    k = compilers.parse_amdgpu_metadata(_ASM)
    assert [x["name"] for x in k] == ["_Z12strided_copyI6__halfEvPKT_PS1_xxxxxxxxxxxxxxxxxxx",
                                      "_Z12strided_copyIfEvPKT_PS0_xxxxxxxxxxxxxxxxxxx"]
    assert (k[0]["vgpr_count"], k[0]["sgpr_count"], k[0]["group_segment_fixed_size"],
            k[0]["vgpr_spill_count"], k[0]["wavefront_size"]) == (46, 94, 0, 0, 64)
    assert (k[1]["agpr_count"], k[1]["vgpr_count"], k[1]["sgpr_count"],
            k[1]["group_segment_fixed_size"], k[1]["private_segment_fixed_size"],
            k[1]["vgpr_spill_count"], k[1]["sgpr_spill_count"], k[1]["wavefront_size"]) \
        == (4, 128, 40, 16384, 24, 6, 2, 32)
    assert "args" not in k[0] and "offset" not in k[0]
    assert compilers.parse_amdgpu_metadata("no metadata here") == []


def test_report_prints_a_row_per_kernel(monkeypatch, capsys):
    monkeypatch.setenv(cc_cache.CACHE_ENV, "off")
    (copy,) = [m for m in REGISTRY if m.source == "common/copy.cu"]
    if compilers.clang_for("gfx942") is None:
        if cc_check.require_compilers():
            pytest.fail("clang missing but CUPYCONV_REQUIRE_COMPILERS is set")
        pytest.skip("no clang that knows gfx942")
    rows = amd_report.resource_report([copy])
    assert len(rows) == len(copy.name_expressions) * len(amd_report.REPORT_ARCHS)
    assert {r["kernel"] for r in rows} == set(copy.name_expressions)
    assert all(r["vgpr_count"] > 0 and r["sgpr_count"] > 0 and r["wavefront_size"] == 64
               for r in rows)
    assert amd_report.report_main(modules="common/copy.cu") == 0
    out = capsys.readouterr().out
    assert "strided_copy<float>" in out and "VGPR spill" in out


def test_every_cli_option_has_help():
    from cupyconv.__main__ import build_parser

    parser, subs = build_parser()
    for name, sub in subs.items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help text"
        assert "exit status" in (sub.epilog or ""), name


# --------------------------------------------------------------------------- the demo's sample (compile_sample)
def _sample_key(module, name_expression):
    """(source, template, dtype class, main loop) of one instantiation of ``module``."""
    from dataclasses import replace

    from cupyconv._core.kernels import main_loop

    for t in module.templates:
        for d in module.dtypes:
            if name_expression in replace(module, templates=(t,), dtypes=(d,)).name_expressions:
                return module.source, t, compile_sample.dtype_class(d), main_loop(module)
    raise AssertionError(f"{name_expression} is not an instantiation of {module}")


def test_the_sample_has_one_instantiation_per_source_kernel_dtype_class_and_main_loop(monkeypatch):
    """The demo's subset follows its rule over the whole registry (no list to keep): every
    (source, template, dtype class, GEMM main loop) once, each a real instantiation of its module,
    compiled with its module's own source text; a small share of the full check."""
    from cupyconv._core.kernels import MATH_WGMMA, main_loop

    monkeypatch.delenv(cc_check.MODULES_ENV, raising=False)
    modules = cc_check.all_modules()
    everything = {_sample_key(m, ne) for m in modules for ne in m.name_expressions}
    picked = [(s, ne) for s in compile_sample.sample(modules) for ne in s.name_expressions]
    keys = [_sample_key(s.module, ne) for s, ne in picked]
    assert len(keys) == len(set(keys)) and set(keys) == everything
    assert all(s.code == s.module.code and s.vendors == s.module.vendors and s.module in modules
               for s, _ in picked)
    assert {s.source for s, _ in picked} == {m.source for m in modules}
    assert {k[2] for k in keys} >= {"float16", "bfloat16", "float32", "float64", "complex",
                                    "integer:integer:float64"}
    assert {k[3] for k in keys if k[0] == "gemm/conv_fprop.cu"} == set(range(MATH_WGMMA + 2))
    # of its candidates, a module of the smallest tile (64x64 GEMM tiles, not 128x128)
    gemm = [s.module for s, _ in picked if main_loop(s.module) is not None]
    assert gemm and all(m.tile[:2] == (64, 64) for m in gemm)
    assert len(picked) * 4 < sum(len(m.name_expressions) for m in modules)
    # a restriction by pattern samples only those sources
    assert {s.source for s in compile_sample.sample(cc_check.select_modules("gemm/im2col.cu"))} == \
        {"gemm/im2col.cu"}


def test_dtype_classes():
    assert [compile_sample.dtype_class(d) for d in ("float16", "bfloat16", "float32", "float64")] == \
        ["float16", "bfloat16", "float32", "float64"]
    assert {compile_sample.dtype_class(d) for d in ("complex64", "complex128")} == {"complex"}
    assert {compile_sample.dtype_class(d) for d in ("uint8", "int64", "uint64")} == {"integer"}
    assert compile_sample.dtype_class("int16:complex128:complex128") == "integer:complex:complex"


def test_the_sample_targets_nvidia_and_one_amd_target_where_a_compiler_is_installed(monkeypatch):
    def missing():
        raise compilers.CompilerMissing("no HIPRTC")

    nvidia = [("nvidia", a) for a in compilers.NVIDIA_ARCHS]
    monkeypatch.setattr(compilers, "_load_hiprtc", lambda: None)
    assert compile_sample.sample_targets() == nvidia + [("amd", "gfx90a")]
    monkeypatch.setattr(compilers, "_load_hiprtc", missing)
    monkeypatch.setattr(compilers, "clang_for", lambda arch: "/usr/bin/clang-19")
    assert compile_sample.sample_targets() == nvidia + [("clang", "gfx942")]
    monkeypatch.setattr(compilers, "clang_for", lambda arch: None)
    assert compile_sample.sample_targets() == nvidia


def test_the_sample_prints_a_line_per_family_and_target_and_the_full_check(monkeypatch):
    import io

    compiled = []

    def fake(module, vendor, arch, hiprtc=None):
        compiled.append((module.source, vendor, arch, module.name_expressions))
        return cc_check.CheckResult(module.source, vendor, arch, "ok", 0.5)

    mods = (FakeModule("// a\n", "fam1/a.cu", ("k<float>", "k<double>")),
            FakeModule("// b\n", "fam2/b.cu", ("k<float>",)),
            FakeModule("// c\n", "fam1/c.cu", ("k<float>",)))
    monkeypatch.setattr(cc_check, "select_modules", lambda patterns=None: mods)
    monkeypatch.setattr(cc_check, "sample", lambda modules: tuple(modules))
    monkeypatch.setattr(cc_check, "check_module", fake)
    monkeypatch.setattr(cc_check, "sample_targets",
                        lambda: [("nvidia", "sm_80"), ("amd", "gfx90a")])
    out = io.StringIO()
    assert cc_check.sample_main(out=out) == 0
    lines = out.getvalue().splitlines()
    progress = [line.split()[:4] for line in lines if line.startswith("  ")]
    assert progress == [["sm_80", "NVRTC", "fam1", "2"], ["sm_80", "NVRTC", "fam2", "1"],
                        ["gfx90a", "HIPRTC", "fam1", "2"], ["gfx90a", "HIPRTC", "fam2", "1"]]
    assert "(  1.0 s: a.cu, c.cu)" in lines[2]
    assert len(compiled) == 6 and "compile check: 6 ok, 0 failed" in out.getvalue()
    assert lines[-1].endswith("python3 -m cupyconv compile-check")


def test_the_sample_reports_a_failure_and_the_missing_amd_compiler(monkeypatch):
    import io

    monkeypatch.setattr(cc_check, "select_modules", lambda patterns=None: (_module(BROKEN_BODY),))
    monkeypatch.setattr(cc_check, "sample", lambda modules: tuple(modules))
    monkeypatch.setattr(cc_check, "sample_targets", lambda: [("nvidia", "sm_90")])
    monkeypatch.setenv(cc_cache.CACHE_ENV, "off")
    out = io.StringIO()
    rc = cc_check.sample_main(out=out)
    text = out.getvalue()
    if "skipped 1 compiles" in text:
        pytest.skip("NVRTC is not installed")
    assert rc == 1 and "FAILED" in text and "undeclared_name" in text
    assert "AMD not checked" in text


@pytest.mark.parametrize("setting", ["", "full"])
def test_the_full_check_builds_the_sample_for_the_clang_targets_unless_asked(monkeypatch, setting):
    """Every module goes to NVRTC and HIPRTC; the clang targets get the sample, or every module
    with CUPYCONV_COMPILE_CHECK_CLANG=full.  The header says which."""
    import io

    seen = []

    def fake_run(modules, vendors=("nvidia", "amd", "clang"), progress=None, **kw):
        seen.append((tuple(vendors), tuple(modules)))
        return [cc_check.CheckResult(m.source, v, a, "ok") for v, a in cc_check.targets(vendors)
                for m in modules if ("amd" if v == "clang" else v) in m.vendors]

    mods = (FakeModule("// a\n", "fam1/a.cu", ("k<float>", "k<double>")),)
    sampled = (FakeModule("// a\n", "fam1/a.cu", ("k<float>",)),)
    monkeypatch.setattr(cc_check, "select_modules", lambda patterns=None: mods)
    monkeypatch.setattr(cc_check, "sample", lambda modules: sampled)
    monkeypatch.setattr(cc_check, "run_check", fake_run)
    monkeypatch.setattr(compilers, "clang_archs", lambda: ("gfx942",))
    monkeypatch.setenv(cc_check.CLANG_ENV, setting)
    out = io.StringIO()
    assert cc_check.main(out=out) == 0
    assert seen == [(("nvidia", "amd"), mods), (("clang",), mods if setting else sampled)]
    header = out.getvalue().splitlines()[0]
    assert ("the sample" in header) == (setting != "full")
