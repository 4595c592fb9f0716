"""Every registered kernel compiles for NVIDIA (NVRTC, cubin) and AMD (HIPRTC), without a GPU."""

from dataclasses import dataclass

import pytest

from cupyconv._cli import compile_check as cc_check
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
    archs = cc_check.NVIDIA_ARCHS if vendor == "nvidia" else cc_check.AMD_ARCHS
    assert len(results) == sum(vendor in m.vendors for m in REGISTRY) * len(archs)
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
    from cupyconv._core.kernels import load_source

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
    monkeypatch.setattr(cc_check, "REGISTRY", (_module(BROKEN_BODY),))
    monkeypatch.setattr(cc_check, "NVIDIA_ARCHS", ("sm_90",))
    monkeypatch.setattr(cc_check, "AMD_ARCHS", ("gfx90a",))
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
    monkeypatch.delenv(cc_check.CACHE_ENV, raising=False)
    monkeypatch.setattr(cc_check, "_WORKER_CMD", [sys.executable, "-c", _FAKE_WORKER])
    monkeypatch.setattr(cc_check, "_load_hiprtc", lambda: None)
    monkeypatch.setattr(cc_check, "AMD_ARCHS", ("gfx90a", "gfx1030"))
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
    monkeypatch.setenv(cc_check.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(cc_check, "_WORKER_CMD", [sys.executable, "-c", _FAKE_WORKER])
    monkeypatch.setattr(cc_check, "_load_hiprtc", lambda: None)
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
