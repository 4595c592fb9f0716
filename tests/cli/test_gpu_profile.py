"""The profiler, the ceilings and the autotuner on a GPU (small problems)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]

# (op, extra arguments): small problems touching stride, padding, groups, layout and dtype.
CASES = [
    ("fwd", ["-N", "2", "-C", "16", "-K", "24", "--input", "17,19", "--pad", "1", "--bias"]),
    ("fwd", ["-N", "2", "-C", "8", "-K", "8", "--input", "12", "--kernel", "5", "--stride", "2",
             "--pad", "same", "--layout", "NHWC", "--dtype", "float16"]),
    ("fwd", ["-N", "2", "-C", "32", "-K", "16", "--input", "40", "--kernel", "1",
             "--method", "im2col_gemm"]),
    ("bwd-data", ["-N", "2", "-C", "16", "-K", "8", "--input", "15", "--stride", "2", "--pad", "1",
                  "--groups", "2"]),
    ("bwd-weight", ["-N", "2", "-C", "8", "-K", "16", "--input", "14", "--pad-lo", "1",
                    "--pad-hi", "0", "--layout", "NHWC", "--dtype", "float64"]),
    ("transpose", ["-N", "2", "-C", "16", "-K", "8", "--input", "7", "--stride", "2", "--pad", "1",
                   "--output-padding", "1", "--bias"]),
    ("fwd", ["--ndim", "3", "-N", "1", "-C", "4", "-K", "8", "--input", "9", "--pad", "1"]),
    ("bwd-data", ["-N", "2", "-C", "8", "-K", "8", "--input", "13", "--pad", "1", "--layout", "NHWC",
                  "--dtype", "bfloat16"]),
]


def run_profile_cli(op, extra, verify, tmp_path):
    out = tmp_path / f"{op}-{verify}.json"
    proc = subprocess.run([sys.executable, "-m", "cupyconv", "profile", op, *extra, "--verify",
                           str(verify), "--repeat", "3", "--warmup", "1", "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.parametrize("verify", [0, 1, 2])
@pytest.mark.parametrize("op, extra", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_profile_each_operation_with_each_verification_mode(op, extra, verify):
    from cupyconv.__main__ import build_parser
    from cupyconv._cli.profile import format_report, run_profile
    from cupyconv._cli.profile_args import problem_from_args

    parser, _ = build_parser()
    args = parser.parse_args(["profile", op, *extra, "--verify", str(verify), "--repeat", "3",
                              "--warmup", "1"])
    result = run_profile(problem_from_args(args))
    json.dumps(result)  # serializable
    assert result["ms"] > 0 and result["tflops"] > 0 and result["gbps"] > 0
    assert 0 < result["fraction_of_ceiling"]["flops"] < 2
    assert 0 < result["fraction_of_ceiling"]["bandwidth"] < 2
    assert result["verify"]["mode"] == verify
    if verify:
        assert result["verify"]["passed"], result["verify"]
    if op in ("bwd-data", "bwd-weight", "transpose"):
        assert result["launches"]  # every backward pass runs the tiled GEMM
    text = format_report(result)
    assert "TFLOP/s" in text and "% of" in text
    assert ("PASS" in text) == bool(verify)


def test_cli_json_to_stdout_and_exit_status(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cupyconv", "profile", "fwd", "-N", "1", "-C", "8",
                           "-K", "8", "--input", "16", "--pad", "1", "--repeat", "2", "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verify"]["passed"] and result["algorithm"]["algorithm"]
    assert "verify" in proc.stderr  # the text report goes to stderr with --json
    proc, result = run_profile_cli("bwd-weight", ["-N", "1", "-C", "4", "-K", "4", "--input", "8",
                                                  "--progress"], 2, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "timing 3/3" in proc.stderr and result["verify"]["passed"]


@pytest.mark.parametrize("op, extra", [
    ("separable", ["-N", "2", "-C", "16", "-K", "24", "--input", "20", "--pad", "1"]),
    ("signal", ["--input", "200,150", "--kernel", "7"]),
    ("signal", ["--ndim", "1", "--input", "1000", "--kernel", "31", "--mode", "full",
                "--dtype", "complex64", "--signal-op", "convolve"]),
])
@pytest.mark.parametrize("verify", [1, 2])
def test_separable_and_signal_profile_or_say_they_are_missing(op, extra, verify, tmp_path):
    proc, result = run_profile_cli(op, extra, verify, tmp_path)
    import cupyconv

    present = hasattr(cupyconv, "separable_conv") if op == "separable" else \
        hasattr(cupyconv, "signal")
    if not present:
        assert proc.returncode == 3 and "has no" in proc.stderr
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["verify"]["passed"]


def _cases_for_planning():
    from cupyconv._core.geometry import ConvGeometry

    return [ConvGeometry.from_shapes((4, 32, 20, 20), (48, 32, 3, 3), padding=1, dtype="float32"),
            ConvGeometry.from_shapes((2, 64, 40, 40), (32, 64, 1, 1), dtype="float32"),
            ConvGeometry.from_shapes((2, 9, 9, 64), (64, 3, 3, 64), padding=1, layout="NHWC",
                                     dtype="float16")]


@pytest.mark.parametrize("method", ["auto", "implicit_gemm", "im2col_gemm"])
def test_reported_plan_is_the_launched_plan(method):
    import cupy

    from cupyconv._gemm.launch import record_plans
    from cupyconv._dispatch.choose import choose, describe
    from cupyconv._dispatch.forward import FORWARD

    for g in _cases_for_planning():
        x = cupy.ones(g.input_shape, g.dtype)
        w = cupy.ones(g.weight_shape, g.dtype)
        y = cupy.empty(g.output_shape, g.dtype)
        algo = choose(g, method)
        with record_plans() as log:
            algo.run(g, x, w, None, y)
        info = describe(g, method)
        if not FORWARD[info["algorithm"]].tiled:
            assert not log
            continue
        (kernel, shape, plan), = log
        assert info["gemm"]["kernel"] == kernel
        assert tuple(info["gemm"]["tile"]) == plan.tile and info["gemm"]["splits"] == plan.splits
        assert (info["gemm"]["m"], info["gemm"]["n"], info["gemm"]["k"],
                info["gemm"]["batch"]) == shape


def test_ceilings_are_measured_and_plausible():
    from cupyconv._cli.ceilings import ceilings

    c = ceilings("float32")
    assert c.source == "measured"
    assert 1e11 < c.bandwidth < 1e14 and 1e12 < c.flops < 1e15
    assert ceilings("float32") == c  # once per process


def test_tune_with_a_fake_timer_then_autotune_runs_the_winner(tmp_path, monkeypatch):
    import cupy

    import cupyconv as cc
    from cupyconv import reference
    from cupyconv._dispatch import choose as _choose
    from cupyconv._gemm.launch import record_plans
    from cupyconv._core.geometry import ConvGeometry
    from cupyconv._dispatch.tune import TuneCache, tune_geometry

    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    g = ConvGeometry.from_shapes((2, 16, 18, 18), (32, 16, 3, 3), padding=1, dtype="float32")
    # The fake timer ranks configurations by call order: every candidate runs (and is checked
    # against the direct kernel) and the third one timed wins.
    order = []

    def timer(fn):
        fn()
        order.append(len(order))
        return 1.0 if len(order) == 3 else 5.0

    result = tune_geometry(g, timer=timer, cache=TuneCache())
    assert not result.cached and result.ms == 1.0
    assert all(v is not None for v in result.timings.values())
    winner = result.best
    assert (tmp_path / "tune.json").exists()

    monkeypatch.setenv("CUPYCONV_AUTOTUNE", "1")
    _choose.tuned_choice.cache_clear()
    rng = np.random.default_rng(1)
    xh = rng.uniform(-1, 1, g.input_shape).astype("float32")
    wh = rng.uniform(-1, 1, g.weight_shape).astype("float32")
    with record_plans() as log:
        y = cc.conv(cupy.asarray(xh), cupy.asarray(wh), padding=1)
    assert _choose.choose(g, "auto").name == winner.algorithm
    if winner.tile is not None:
        assert log and all(p.tile == winner.tile and p.splits == winner.splits for _, _, p in log)
    ref = reference.conv(xh, wh, padding=1)
    assert np.linalg.norm(y.get() - ref) / np.linalg.norm(ref) < 1e-5
    _choose.tuned_choice.cache_clear()


def test_public_tune_measures_once_then_reads_the_cache(tmp_path):
    import cupyconv as cc

    path = tmp_path / "t.json"
    first = cc.tune((2, 8, 16, 16), (8, 8, 3, 3), padding=1, cache_file=path)
    assert not first.cached and first.ms > 0 and len(first.timings) > 3
    second = cc.tune((2, 8, 16, 16), (8, 8, 3, 3), padding=1, cache_file=path)
    assert second.cached and second.best == first.best
