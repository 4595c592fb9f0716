"""``python -m cupyconv profile``: argument parsing and errors (no GPU needed)."""

import subprocess
import sys
from pathlib import Path

import pytest

from cupyconv.__main__ import build_parser, main
from cupyconv._cli.profile_args import problem_from_args

ROOT = Path(__file__).resolve().parents[2]


def parse(*argv):
    parser, _ = build_parser()
    return problem_from_args(parser.parse_args(["profile", *argv]))


def test_forward_problem_from_the_command_line():
    p = parse("fwd", "-N", "4", "-C", "32", "-K", "48", "--input", "30,31", "--kernel", "3x5",
              "--stride", "2", "--pad", "1,2", "--groups", "4", "--dtype", "float16",
              "--method", "implicit_gemm", "--verify", "2", "--init", "1", "--repeat", "7")
    g = p.geom
    assert (g.batch, g.in_channels, g.out_channels, g.groups) == (4, 32, 48, 4)
    assert g.spatial == (30, 31) and g.kernel == (3, 5) and g.stride == (2, 2)
    assert g.pad_lo == g.pad_hi == (1, 2)
    assert g.weight_shape == (48, 8, 3, 5) and g.dtype == "float16"
    assert parse("fwd", "--dtype", "bfloat16").geom.dtype == "bfloat16"
    assert (p.method, p.verify, p.init, p.repeat) == ("implicit_gemm", 2, 1, 7)


def test_ndim_comes_from_the_shapes_or_the_flag():
    assert parse("fwd", "--input", "8,9,10", "--kernel", "3").geom.ndim == 3
    assert parse("fwd", "--ndim", "1", "--input", "100", "--kernel", "7").geom.spatial == (100,)
    assert parse("bwd-weight").geom.spatial == (56, 56)  # defaults: 2-d, 56x56, 3x3


def test_padding_forms():
    assert parse("fwd", "--pad", "same", "--stride", "2").geom.out_spatial == (28, 28)
    g = parse("fwd", "--pad-lo", "2,0", "--pad-hi", "1").geom
    assert g.pad_lo == (2, 0) and g.pad_hi == (1, 1)
    assert parse("fwd", "--pad", "valid").geom.out_spatial == (54, 54)


def test_channels_last_shapes():
    p = parse("bwd-data", "--layout", "NHWC", "-N", "2", "-C", "8", "-K", "16", "--input", "10")
    assert p.geom.input_shape == (2, 10, 10, 8) and p.geom.weight_shape == (16, 3, 3, 8)


def test_transpose_problem():
    p = parse("transpose", "-N", "2", "-C", "16", "-K", "8", "--input", "7", "--kernel", "3",
              "--stride", "2", "--pad", "1", "--output-padding", "1")
    assert p.x_shape == (2, 16, 7, 7) and p.w_shape == (16, 8, 3, 3)
    # the transposed output (2 * 7 = 14) is the input of the matching forward convolution
    assert p.geom.input_shape == (2, 8, 14, 14) and p.geom.output_shape == (2, 16, 7, 7)
    assert p.options["output_padding"] == (1, 1)


def test_separable_and_signal_problems_parse_without_their_modules():
    p = parse("separable", "-C", "24", "-K", "40", "--input", "20", "--pad", "1", "--stride", "2")
    assert p.geom.groups == 24 and p.geom.weight_shape == (24, 1, 3, 3)
    assert p.pointwise.weight_shape == (40, 24, 1, 1)
    assert p.pointwise.output_shape == (8, 40, 10, 10)
    s = parse("signal", "--input", "100,80", "--kernel", "5", "--mode", "valid", "--dtype",
              "complex64", "--signal-op", "convolve")
    assert s.signal["out"] == (96, 76) and s.signal["op"] == "convolve"
    assert parse("signal", "--ndim", "1", "--input", "1000", "--kernel", "31").signal["out"] == (1000,)


@pytest.mark.parametrize("argv, message", [
    (["fwd", "-C", "6", "--groups", "4"], "divisible by groups"),
    (["fwd", "--pad", "1", "--pad-lo", "1"], "either --pad or --pad-lo"),
    (["fwd", "--pad", "maybe"], "--pad must be an integer"),
    (["fwd", "--kernel", "3,3,3", "--input", "5,5"], "--input has 2 values and --kernel 3"),
    (["fwd", "--kernel", "9", "--input", "5"], "larger than the padded input"),
    (["fwd", "--ndim", "4"], "--ndim must be 1-3"),
    (["fwd", "-N", "0"], "-N must be >= 1"),
    (["fwd", "--stride", "0"], "stride must be >= 1"),
    (["fwd", "--method", "winograd"], "--method must be one of"),
    (["fwd", "--dtype", "int8"], "--dtype must be one of"),
    (["fwd", "--repeat", "0"], "--repeat must be >= 1"),
    (["fwd", "--verify", "1", "--init", "0"], "needs initialized inputs"),
    (["bwd-data", "--method", "direct"], "one algorithm"),
    (["bwd-weight", "--bias"], "--bias does not apply"),
    (["fwd", "--output-padding", "1"], "transpose only"),
    (["transpose", "--pad", "same"], "not 'same'"),
    (["transpose", "--stride", "2", "--output-padding", "2"], "output_padding"),
    (["separable", "--groups", "2"], "leave --groups out"),
    (["signal", "-C", "3"], "one array and one kernel"),
    (["signal", "--stride", "2"], "--mode instead"),
    (["signal", "--dtype", "float16"], "for signal"),
    (["signal", "--dtype", "bfloat16"], "for signal"),
    (["signal", "--method", "implicit_gemm"], "auto"),
    (["signal", "--input", "5,10", "--kernel", "7,3", "--mode", "valid"], "valid"),
])
def test_bad_arguments_exit_with_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["profile", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "usage:" in err


def test_unknown_operation_and_verify_mode_are_argparse_errors(capsys):
    for argv in (["profile", "fft"], ["profile", "fwd", "--verify", "3"],
                 ["profile", "fwd", "--init", "5"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_profile_without_gpu_says_so():
    from cupyconv._core.timing import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present: tests/cli/test_gpu_profile.py runs the profiler")
    proc = subprocess.run([sys.executable, "-m", "cupyconv", "profile", "fwd", "--input", "8"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 3
    assert "no GPU" in proc.stderr


def test_help_lists_every_operation():
    proc = subprocess.run([sys.executable, "-m", "cupyconv", "profile", "--help"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0
    for op in ("fwd", "bwd-data", "bwd-weight", "transpose", "separable", "signal", "--verify",
               "--init", "--repeat", "--json"):
        assert op in proc.stdout


def test_readme_profile_commands_parse():
    import shlex

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    lines = [line.split("#")[0] for page in pages for line in page.read_text().splitlines()
             if line.startswith("python3 -m cupyconv profile ")]
    assert len(lines) >= 6
    for line in lines:
        parse(*shlex.split(line)[4:])
