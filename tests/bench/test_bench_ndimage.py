"""The pure parts of bench_ndimage.py (issue 18, item 3; CPU only): the problem list and its
labels, options, weights, and the summary, target line and report of a fake run."""

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
H100_L2 = 50 * 2 ** 20


@pytest.fixture(scope="module")
def bn():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("bench_ndimage")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_problem_list(bn):
    ps = bn.problems()
    labels = [p.label for p in ps]
    assert len(ps) == 20 and len(set(labels)) == 20
    assert labels[:10] == [
        "2-d correlate k=3", "2-d correlate k=7", "2-d correlate k=15",
        "2-d gaussian_filter sigma=1", "2-d gaussian_filter sigma=2",
        "2-d gaussian_filter sigma=5", "2-d uniform_filter size=5", "2-d uniform_filter size=15",
        "2-d sobel axis=0", "2-d sobel axis=-1"]
    assert [p.label.replace("3-d", "2-d") for p in ps[10:]] == labels[:10]
    assert {p.shape for p in ps} == {(4096, 4096), (256, 256, 256)}
    by = {p.label: p for p in ps}
    assert by["3-d correlate k=15"].taps == 3375
    assert by["2-d gaussian_filter sigma=5"].taps == 2 * 41  # radius int(4 * 5 + 0.5) = 20
    assert by["3-d sobel axis=0"].taps == 9 and by["2-d uniform_filter size=15"].taps == 30
    # both shapes hold 2^24 floats: 128 MiB in and out, past the L2 but not 3x it
    assert {p.nbytes for p in ps} == {2 * 4 * 2 ** 24}


def test_selection_and_quick(bn):
    quick = bn.problems(quick=True)
    assert [p.label for p in quick] == [
        "2-d correlate k=7", "2-d gaussian_filter sigma=2", "3-d correlate k=3",
        "3-d uniform_filter size=5", "3-d sobel axis=0"]
    assert set(bn.QUICK) <= {p.label for p in bn.problems()}
    only = bn.problems(ndims=[3], ops=["sobel", "correlate"])
    assert [p.label for p in only] == ["3-d correlate k=3", "3-d correlate k=7",
                                       "3-d correlate k=15", "3-d sobel axis=0",
                                       "3-d sobel axis=-1"]


def test_options(bn):
    args = bn.parse_args([])
    assert args.ndims == [2, 3] and args.ops == list(bn.OPS) and args.repeat == 5
    assert args.targets == {"geomean": 3.0, "min": 1.0} and not args.quick
    args = bn.parse_args(["--ndims", "3", "--ops", "sobel,correlate", "--quick",
                          "--target-geomean", "2"])
    assert args.ndims == [3] and args.ops == ["correlate", "sobel"] and args.repeat == 3
    assert args.targets == {"geomean": 2.0, "min": 1.0}
    for bad in (["--ndims", "4"], ["--ops", "median_filter"], ["--ops", ""], ["--repeat", "0"]):
        with pytest.raises(SystemExit) as exc:
            bn.parse_args(bad)
        assert exc.value.code == 2, bad


def test_weights_are_seeded_dense_float32(bn):
    p = bn.Problem(3, "correlate", 7)
    w = bn.host_weights(p)
    assert w.shape == (7, 7, 7) and w.dtype == np.float32
    assert np.array_equal(w, bn.host_weights(p)) and np.all(w != 0)
    assert bn.host_weights(bn.Problem(2, "sobel", 0)) is None


def _row(bn, label, ratio, ok=True, timing="graph"):
    p = next(q for q in bn.problems() if q.label == label)
    ours = 1.0
    row = {"problem": p.label, "ndim": p.ndim, "op": p.op, "param": p.param,
           "shape": list(p.shape), "dtype": "float32", "taps": p.taps, "bytes": p.nbytes,
           "copies": 2, "repeat": 5, "ours_ms": ours, "cupyx_ms": ratio * ours, "ratio": ratio,
           "GBps": p.nbytes / 1e-3 / 1e9, "err": 1e-7 if ok else 3e-3, "ok": ok,
           "timing": timing}
    if timing != "graph":
        row["graph_error"] = "CUDARuntimeError: capture"
    return row


def _fake(bn):
    rows = [_row(bn, "2-d correlate k=3", 4.0), _row(bn, "2-d correlate k=7", 9.0),
            _row(bn, "3-d sobel axis=0", 0.5, ok=False, timing="events")]
    result = {"benchmark": "ndimage", "gpu": "NVIDIA H100 80GB HBM3", "l2_bytes": H100_L2,
              "cupy": "14.2.0", "commit": "abc1234", "date": "2026-11-24 12:00:00",
              "settings": {"l2_factor": 3, "tolerance": bn.TOLERANCE}, "targets": bn.TARGETS,
              "rows": rows}
    result["summary"] = bn.summary(rows)
    return result


def test_summary(bn):
    result = _fake(bn)
    lines = {s["group"]: s for s in result["summary"]}
    assert list(lines) == ["all", "2-d correlate", "3-d sobel"]
    total = lines["all"]
    assert total["problems"] == 3 and total["geomean"] == pytest.approx((4 * 9 * 0.5) ** (1 / 3))
    assert total["min"] == 0.5 and total["min_problem"] == "3-d sobel axis=0"
    assert total["mismatches"] == 1
    assert total["target"] == {"geomean": False, "min": False}
    assert lines["2-d correlate"]["geomean"] == pytest.approx(6.0)
    assert lines["2-d correlate"]["target"] is None
    good = bn.summary(result["rows"][:2])[0]
    assert good["target"] == {"geomean": True, "min": True}
    assert bn.target_line(good, bn.TARGETS) == (
        "target (>= 3.00x geomean, none slower than 1.00x): met: geomean 6.00x, min 4.00x "
        "(2-d correlate k=3), 0 mismatches")
    assert bn.target_line(total, bn.TARGETS).startswith(
        "target (>= 3.00x geomean, none slower than 1.00x): missed (geomean, min)")
    assert bn.target_line(bn.summary([])[0], bn.TARGETS).endswith("no problem timed")


def test_markdown_and_results_file(bn, tmp_path):
    result = _fake(bn)
    text = bn.markdown(result)
    assert "| all | 3 | 2.62x | 0.50x (3-d sobel axis=0) | 1 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 3-d sobel axis=0 |"))
    assert "**MISMATCH**" in row and "| events |" in row
    assert "- 3-d sobel axis=0: CUDARuntimeError: capture" in text
    stem = bn.results_stem("ndimage", result["gpu"], result["commit"], False)
    assert stem == "ndimage-NVIDIA_H100_80GB_HBM3-abc1234"
    path = bn.write_results(result, tmp_path, stem, text)
    assert path.name == "ndimage-NVIDIA_H100_80GB_HBM3-abc1234.json"
    assert json.loads(path.read_text())["rows"][0]["problem"] == "2-d correlate k=3"
