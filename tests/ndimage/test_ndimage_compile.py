"""The ndimage kernel modules compile with NVRTC (cubin, sm_80 and sm_90a) and HIPRTC, without a
GPU, and the compile check's CLI covers them."""

import pytest

from cupyconv._cli import compile_check as cc_check
from cupyconv._ndimage.kernels import ND_PLANE, STORAGE_DTYPES, NdModule, check_modules


def test_check_set_covers_every_storage_dtype():
    mods = check_modules()
    triples = [m.dtypes[0].split(":") for m in mods if isinstance(m, NdModule)]
    assert set(ND_PLANE.values()) <= set(mods)  # the row walk's modules too
    assert {t[0] for t in triples} >= set(STORAGE_DTYPES)
    assert {t[2] for t in triples} == {"float32", "float64", "complex64", "complex128"}
    assert set(mods) <= set(cc_check.all_modules())


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_ndimage_modules_compile(vendor):
    results = cc_check.run_check(check_modules(), vendors=(vendor,))
    failed = [r for r in results if r.status == "failed"]
    assert not failed, "\n\n".join(f"{r.source} {r.arch}:\n{r.log[:3000]}" for r in failed)
    if any(r.status == "skipped" for r in results):
        if cc_check.require_compilers():
            pytest.fail(f"{vendor} compiler missing")
        pytest.skip(f"{vendor} compiler missing")
