"""Every registered kernel compiles for NVIDIA (NVRTC, cubin) and AMD (HIPRTC), without a GPU."""

from dataclasses import dataclass

import pytest

from cupyconv import _compile_check as cc_check
from cupyconv._kernels import REGISTRY


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
    assert len(results) == len(REGISTRY) * len(archs)
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


BROKEN_BODY = """
template <typename T> __global__ void k(T* y) { y[threadIdx.x] = undeclared_name + 1; }
"""
VALID_BODY = """
template <typename T> __global__ void k(T* y) { y[threadIdx.x] = cc::store_as<T>(1.0f); }
"""


def _module(body):
    from cupyconv._kernels import load_source

    return FakeModule(load_source("common.cuh") + body)


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
