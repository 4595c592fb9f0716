"""The pure parts of bench_train_step.py (issue 46, item 5; CPU only): the shapes and their
counts, the options, the error bounds, the per-network sums of fake results and their tables."""

import importlib
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import cupyconv
from cupyconv._core import verify

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ts():
    folder = str(ROOT / "benchmarks")
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module("bench_train_step")
    finally:
        sys.path.remove(folder)


# --------------------------------------------------------------------------------- shapes
def test_shapes_of_the_three_networks(ts):
    entries = ts.bench_layers()
    counts = {net: sum(dict(e.counts).get(net, 0) for e in entries) for net in ts.NETS}
    assert counts == {"resnet50": 53, "efficientnet_b0": 81, "convnext_t": 58}
    labels = [e.label for e in entries]
    assert len(set(labels)) == len(labels) == 85  # 23 + 46 + 16 shapes, none shared
    assert labels[0] == "conv 7x7 s2 p3 3->64 224^2"
    convnext = [e for e in entries if "convnext_t" in dict(e.counts)]
    assert [(e.label, dict(e.counts)["convnext_t"]) for e in convnext][:4] == [
        ("conv 4x4 s4 p0 3->96 224^2", 1), ("dw 7x7 s1 p3 96->96 56^2", 3),
        ("conv 1x1 s1 p0 96->384 56^2", 3), ("conv 1x1 s1 p0 384->96 56^2", 3)]
    assert dict(convnext[-3].counts) == {"convnext_t": 3}  # stage 4's depthwise
    assert ts.bench_layers(["convnext_t"]) == convnext


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_convnext_shapes_are_cupyconvs(ts, layout):
    """The table's output shapes are what cupyconv computes for the calls the benchmark makes."""
    for entry in ts.bench_layers(["convnext_t"]):
        layer = entry.layer
        assert cupyconv.output_shape(
            layer.input_shape(32, layout), layer.weight_shape(layout), stride=layer.stride,
            padding=layer.padding, groups=layer.groups, layout=layout) == \
            layer.output_shape(32, layout)


def test_step_flop(ts):
    flop = ts.step_flop(["resnet50", "convnext_t"], 32)
    # three passes of 2 flop per multiply-add, 4.09 G and 4.45 G multiply-adds per image
    assert flop["resnet50"] == 6 * 32 * 4_087_136_256
    assert flop["convnext_t"] / (6 * 32) == pytest.approx(4.5e9, rel=0.15)


# -------------------------------------------------------------------------------- options
def test_options(ts):
    args = ts.parse_args([])
    assert args.networks == ["resnet50", "efficientnet_b0", "convnext_t"]
    assert args.precisions == ["bf16", "tf32"]
    assert (args.batch, args.repeat) == (32, 3)
    assert args.out.endswith(str(Path("benchmarks") / "results"))
    args = ts.parse_args(["--networks", "convnext_t,resnet50", "--precisions", "tf32",
                          "--batch", "8", "--repeat", "5", "--out", "/tmp/x"])
    assert args.networks == ["resnet50", "convnext_t"]  # the tables' order
    assert (args.precisions, args.batch, args.repeat, args.out) == (["tf32"], 8, 5, "/tmp/x")
    for bad in (["--networks", "vgg16"], ["--networks", ""], ["--precisions", "fp16"],
                ["--batch", "0"], ["--repeat", "0"]):
        with pytest.raises(SystemExit):
            ts.parse_args(bad)


def test_without_torch_main_says_so(ts, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(SystemExit) as exc:
        ts.main(["--out", "/nonexistent"])
    assert exc.value.code == 2
    assert "bench_train_step needs PyTorch" in capsys.readouterr().err


# ------------------------------------------------------------------------- error bounds
def test_allowed_error_is_verifys_bound(ts):
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 8, 5, 5))
    rounding = verify.rel_error(ref.astype(verify.numpy_dtype("bfloat16")), ref)
    assert ts.allowed_error("bf16", rounding) == pytest.approx(verify.tolerance("bfloat16", ref))
    of_rounded = ref + 1e-4 * rng.standard_normal(ref.shape)
    assert ts.allowed_error("tf32", verify.rel_error(of_rounded, ref)) == pytest.approx(
        verify.tf32_tolerance(ref, of_rounded))


def test_round_tf32_is_verifys(ts):
    """The GPU rounding, run on NumPy arrays through a stand-in for torch's dtypes."""
    fake_torch = types.SimpleNamespace(int32=np.int32, float32=np.float32)
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, 10_000).astype(np.float32)
    a[:4] = [0.0, -0.0, 1 + 2 ** -11, -(1 + 2 ** -11)]  # ties round away from zero
    got = ts.round_tf32(fake_torch, a)
    assert np.array_equal(got.view(np.uint32), verify.round_tf32(a).view(np.uint32))
    assert got[2] == 1 + 2 ** -10 and got[3] == -(1 + 2 ** -10)


# ---------------------------------------------------------------------------- the sums
def _row(layer, counts, precision, ours, peer, ok=True):
    """A fake row: ``ours`` / ``peer``: ms per pass (forward, data, weight)."""
    return {"layer": layer, "counts": counts, "precision": precision,
            "passes": {p: {"ours_ms": o, "peer_ms": c, "ratio": c / o, "err": 1e-3,
                           "tol": 5e-3 if ok else 1e-4, "ok": ok, "timing": "graph"}
                       for p, o, c in zip(("forward", "backward-data", "backward-weight"),
                                          ours, peer)}}


def _fake_rows():
    return [
        _row("a", {"resnet50": 3}, "bf16", (1.0, 2.0, 3.0), (2.0, 2.0, 3.0)),
        _row("b", {"resnet50": 1, "convnext_t": 2}, "bf16", (0.5, 0.5, 1.0), (0.25, 0.5, 1.0)),
        _row("c", {"convnext_t": 9}, "bf16", (1.0, 1.0, 1.0), (1.5, 1.5, 1.5), ok=False),
        _row("a", {"resnet50": 3}, "tf32", (2.0, 2.0, 2.0), (2.0, 2.0, 2.0)),
    ]


def test_network_totals_count_each_shape_as_often_as_the_network_has_it(ts):
    rows = _fake_rows()
    totals = ts.network_totals(rows, ["resnet50", "convnext_t"], ["bf16", "tf32"],
                               flop={"resnet50": 6e9, "convnext_t": 3e9})
    by = {(t["network"], t["precision"]): t for t in totals}
    assert set(by) == {("resnet50", "bf16"), ("convnext_t", "bf16"), ("resnet50", "tf32")}
    r = by[("resnet50", "bf16")]
    assert (r["shapes"], r["convs"]) == (2, 4)
    assert r["ours_ms"] == pytest.approx({"forward": 3 * 1.0 + 0.5, "backward-data": 6.5,
                                          "backward-weight": 10.0, "step": 20.0})
    assert r["peer_ms"]["forward"] == pytest.approx(6.25)
    assert r["peer_ms"]["step"] == pytest.approx(3 * 7.0 + 1.75)
    assert r["ratio"]["step"] == pytest.approx(22.75 / 20.0)
    assert r["ratio"]["forward"] == pytest.approx(6.25 / 3.5)
    # the geometric mean: each shape once, whatever its count
    assert r["geomean"]["forward"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert r["geomean"]["backward-weight"] == pytest.approx(1.0)
    assert r["tflops"]["ours"] == pytest.approx(6e9 / 20.0 / 1e9)
    assert r["mismatches"] == []
    # the worst shape first: b (1.75 / 2.0), with its share of our step (1 x 2.0 of 20 ms)
    assert [w["layer"] for w in r["worst"]] == ["b", "a"]
    assert r["worst"][0]["ratio"] == pytest.approx(0.875)
    assert r["worst"][0]["share"] == pytest.approx(0.1)
    assert r["worst"][1]["share"] == pytest.approx(0.9)
    c = by[("convnext_t", "bf16")]
    assert (c["shapes"], c["convs"]) == (2, 11)
    assert c["ours_ms"]["step"] == pytest.approx(2 * 2.0 + 9 * 3.0)
    assert c["peer_ms"]["step"] == pytest.approx(2 * 1.75 + 9 * 4.5)
    assert c["mismatches"] == ["c forward", "c backward-data", "c backward-weight"]
    assert by[("resnet50", "tf32")]["ratio"]["step"] == pytest.approx(1.0)
    # nets or precisions not asked for, or without rows, give no line
    assert ts.network_totals(rows, ["efficientnet_b0"], ["bf16"]) == []
    assert "tflops" not in ts.network_totals(rows, ["resnet50"], ["tf32"])[0]


def test_markdown_and_progress_line(ts):
    rows = _fake_rows()
    result = {"gpu": "NVIDIA H200", "l2_bytes": 60 * 2 ** 20, "commit": "abc1234",
              "date": "2025-01-01 00:00:00", "torch": "2.5", "cudnn": 90100,
              "settings": {"batch": 32, "l2_factor": 3}, "rows": rows,
              "networks": ts.network_totals(rows, ["resnet50", "convnext_t"], ["bf16", "tf32"],
                                            flop={"resnet50": 6e9, "convnext_t": 3e9})}
    text = ts.markdown(result)
    assert "| resnet50 | bf16 | 4 (2) | 20.00 | 22.75 | **1.14x** |" in text
    assert "| convnext_t | bf16 | 11 (2) |" in text
    assert text.count("**MISMATCH** (fwd, data, wgt)") == 1
    assert "graph capture failed" not in text
    rows[0]["passes"]["forward"].update(timing="events", graph_error="boom")
    assert "bf16 a forward: boom" in ts.markdown(result)
    line = ts.row_line(rows[2])
    assert line.startswith("bf16 c") and "[convnext_tx9]" in line
    assert "fwd 1.0000/1.5000 1.50x MISMATCH err 1.0e-03 > 1.0e-04" in line
