"""cupyconv.jit.precompile for a list of convolutions: it compiles (several at once) exactly what
the calls then run, and finding those modules (a run with nothing compiled or launched) leaves
no trace in the plan, prepared-call and tuning caches that could make a later call wrong."""

import pytest

import cupyconv as cc
from cupyconv import jit, reference

from gpu_cases import rng_for
from trust_helpers import rel_error, tolerance, uniform

pytestmark = pytest.mark.gpu

# Forward problems of several algorithms (implicit GEMM, the 1x1 GEMM, depthwise, grouped direct),
# layouts, dtypes and epilogues, and a problem with both gradients.
PROBLEMS = [
    dict(x=(1, 16, 20, 20), w=(32, 16, 3, 3), padding=1),
    dict(x=(2, 12, 12, 32), w=(48, 1, 1, 32), layout="NHWC", dtype="float16", bias=True,
         activation="relu"),
    dict(x=(1, 24, 17, 17), w=(24, 1, 3, 3), padding=1, groups=24, bias=True, z=True),
    dict(x=(1, 32, 9, 9), w=(32, 4, 3, 3), padding=1, groups=8, dtype="float64"),
    dict(x=(2, 8, 15, 15), w=(16, 8, 3, 3), stride=2, padding="same", dtype="bfloat16",
         passes=("forward", "backward_data", "backward_weight")),
]


def _arrays(problem, rng):
    import cupy

    from cupyconv._core.dtypes import numpy_dtype

    dtype = problem.get("dtype", "float32")
    host = {k: uniform(rng, problem[k], "float32").astype(numpy_dtype(dtype)) for k in ("x", "w")}
    geometry = {k: problem[k] for k in ("stride", "padding", "dilation", "groups", "layout")
                if k in problem}
    ys = cc.output_shape(problem["x"], problem["w"], **geometry)
    if problem.get("bias"):
        host["bias"] = uniform(rng, (problem["w"][0],), "float32").astype(numpy_dtype(dtype))
    if problem.get("z"):
        host["z"] = uniform(rng, ys, "float32").astype(numpy_dtype(dtype))
    host["dy"] = uniform(rng, ys, "float32").astype(numpy_dtype(dtype))
    return host, {k: cupy.asarray(v) for k, v in host.items()}, geometry


def _run_and_check(problem, rng):
    """Every pass of ``problem`` on random data, checked against the float64 reference."""
    host, dev, geometry = _arrays(problem, rng)
    dtype = problem.get("dtype", "float32")
    passes = problem.get("passes", ("forward",))
    checks = []
    if "forward" in passes:
        y = cc.conv(dev["x"], dev["w"], dev.get("bias"), z=dev.get("z"),
                    activation=problem.get("activation"), **geometry)
        ref = reference.conv(host["x"], host["w"], host.get("bias"), z=host.get("z"),
                             activation=problem.get("activation"), **geometry)
        checks.append(("forward", y, ref))
    if "backward_data" in passes:
        dx = cc.conv_backward_data(dev["dy"], dev["w"], problem["x"], **geometry)
        checks.append(("backward_data", dx, reference.conv_backward_data(
            host["dy"], host["w"], problem["x"], **geometry)))
    if "backward_weight" in passes:
        dw = cc.conv_backward_weight(dev["x"], dev["dy"], problem["w"], **geometry)
        checks.append(("backward_weight", dw, reference.conv_backward_weight(
            host["x"], host["dy"], problem["w"], **geometry)))
    for name, got, ref in checks:
        err, tol = rel_error(got, ref), tolerance(dtype, ref, fp16_factor=4.0)
        assert err <= tol, f"{name} of {problem}: error {err:.2e} > {tol:.2e}"


def test_precompile_compiles_what_the_calls_run_and_nothing_else():
    cc.clear_caches()
    found = jit.modules_for(PROBLEMS)
    assert found and jit.cache_info()["misses"] == 0  # finding compiled nothing
    assert jit.precompile(problems=PROBLEMS) == len(found)
    compiled = jit.cache_info()["misses"]
    assert compiled == len(found)
    rng = rng_for("precompile")
    for problem in PROBLEMS:  # twice: the first call and the prepared (replayed) one
        _run_and_check(problem, rng)
        _run_and_check(problem, rng)
    assert jit.cache_info()["misses"] == compiled  # every module the calls ran was precompiled


def test_finding_modules_leaves_no_wrong_kernel_behind():
    """A call right after modules_for, with its plans (and the kernels they keep) made while
    nothing compiled, compiles at its first launch and computes the right result."""
    cc.clear_caches()
    jit.modules_for(PROBLEMS)
    rng = rng_for("after discovery")
    for problem in PROBLEMS:
        _run_and_check(problem, rng)
        _run_and_check(problem, rng)


def test_finding_modules_does_not_autotune(monkeypatch, tmp_path):
    monkeypatch.setenv("CUPYCONV_AUTOTUNE", "1")
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    cc.clear_caches()
    assert jit.modules_for(PROBLEMS[:1])
    assert not list(tmp_path.rglob("tune*.json"))  # nothing was timed, nothing stored


def test_precompile_of_modules_and_problems_together():
    from cupyconv._core.kernels import STRIDED_COPY

    cc.clear_caches()
    found = jit.modules_for(PROBLEMS[:1])
    n = jit.precompile([STRIDED_COPY], problems=PROBLEMS[:1], workers=2)
    # (the JIT compiles a module per dtype: STRIDED_COPY counts as its four dtypes' modules)
    assert n == len(set(found) | set(STRIDED_COPY.units())) == jit.cache_info()["misses"]
    assert all(len(m.dtypes) == 1 for m in found)
