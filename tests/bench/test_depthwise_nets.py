"""The pure parts of bench_depthwise_nets.py and sweep_auto.py (issue 17, items 3-4; CPU only):
the layer list, rows and options, byte counts, the timing helpers' bookkeeping (with fake
timers), and the summaries and reports of fake results."""

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
H100_L2 = 50 * 2 ** 20


@pytest.fixture(scope="module")
def mods():
    folders = [str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]
    sys.path[:0] = folders
    try:
        yield {name: importlib.import_module(name)
               for name in ("measure", "bench_depthwise_nets", "sweep_auto", "report")}
    finally:
        for folder in folders:
            sys.path.remove(folder)


@pytest.fixture(scope="module")
def dwn(mods):
    return mods["bench_depthwise_nets"]


@pytest.fixture(scope="module")
def sweep(mods):
    return mods["sweep_auto"]


# ------------------------------------------------------------------------- layers and rows
def test_layers_of_the_three_networks(dwn):
    layers = dwn.bench_layers()
    dw = [e for e in layers if e.family == "depthwise"]
    grouped = [e for e in layers if e.family == "grouped"]
    assert (len(dw), len(grouped)) == (19, 7)
    labels = [e.label for e in layers]
    assert len(set(labels)) == len(labels)
    assert sum(e.uses for e in dw) == 17 + 16 and sum(e.uses for e in grouped) == 16
    assert labels[0] == "dw 3x3 s1 32ch 112^2" and dict(dw[0].counts) == {
        "mobilenetv2": 1, "efficientnet_b0": 1}
    assert {e.label for e in dw if e.layer.kernel == 5} == {
        "dw 5x5 s2 144ch 56^2", "dw 5x5 s1 240ch 28^2", "dw 5x5 s1 480ch 14^2",
        "dw 5x5 s1 672ch 14^2", "dw 5x5 s2 672ch 14^2", "dw 5x5 s1 1152ch 7^2"}
    assert [e.label for e in grouped] == [
        "g32 3x3 s1 128ch 56^2", "g32 3x3 s2 256ch 56^2", "g32 3x3 s1 256ch 28^2",
        "g32 3x3 s2 512ch 28^2", "g32 3x3 s1 512ch 14^2", "g32 3x3 s2 1024ch 14^2",
        "g32 3x3 s1 1024ch 7^2"]
    for e in layers:  # padding kernel // 2: the output is ceil(input / stride)
        assert e.layer.padding == e.layer.kernel // 2
        assert e.layer.out_H == e.layer.out_W == math.ceil(e.layer.H / e.layer.stride)


def test_layer_selection_by_network_and_quick(dwn):
    only = dwn.bench_layers(["mobilenetv2"])
    assert len(only) == 10 and all(dict(e.counts).keys() == {"mobilenetv2"} for e in only)
    assert [e.uses for e in only] == [1, 1, 1, 1, 2, 1, 4, 2, 1, 3]
    assert [e.family for e in dwn.bench_layers(["resnext50_32x4d"])] == ["grouped"] * 7
    quick = dwn.bench_layers(quick=True)
    assert sorted(e.label for e in quick) == sorted(dwn.QUICK_LAYERS)  # each label still exists


def test_row_combos(dwn, sweep):
    assert dwn.row_combos("depthwise") == list(dwn.COMBOS["depthwise"])
    assert len(dwn.COMBOS["depthwise"]) == 5 and dwn.TARGET_COMBOS == (
        ("float32", "NCHW"), ("float32", "NHWC"), ("float16", "NHWC"))
    assert dwn.row_combos("grouped") == [("float32", "NCHW"), ("float16", "NHWC")]
    assert dwn.row_combos("depthwise", dtypes=["float16"]) == [("float16", "NHWC"),
                                                               ("float16", "NCHW")]
    assert dwn.row_combos("depthwise", layouts=["NHWC"], dtypes=["bfloat16"]) == [
        ("bfloat16", "NHWC")]
    assert dwn.row_combos("depthwise", quick=True) == list(dwn.QUICK_COMBOS)
    assert len(sweep.sweep_combos()) == 4
    assert sweep.sweep_combos(layouts=["NHWC"]) == [("float32", "NHWC"), ("float16", "NHWC")]
    assert sweep.sweep_combos(quick=True) == list(dwn.QUICK_COMBOS)


def test_bytes_moved_and_l2_flags(dwn, mods):
    mods_measure = mods["measure"]
    by_label = {e.label: e.layer for e in dwn.bench_layers()}
    n, c = 32, 144
    s1 = dwn.geometry(by_label["dw 3x3 s1 144ch 56^2"], "float32", "NCHW")
    assert s1.bytes_moved(4) == 4 * (2 * n * c * 56 * 56 + c * 9)
    s2 = dwn.geometry(by_label["dw 5x5 s2 144ch 56^2"], "float16", "NHWC")
    assert s2.input_shape == (n, 56, 56, c) and s2.weight_shape == (c, 5, 5, 1)
    assert s2.output_shape == (n, 28, 28, c)
    assert s2.bytes_moved(2) == 2 * (n * c * (56 * 56 + 28 * 28) + c * 25)
    # the layout does not change the bytes
    nchw = dwn.geometry(by_label["dw 5x5 s2 144ch 56^2"], "float16", "NCHW")
    assert nchw.bytes_moved(2) == s2.bytes_moved(2)
    grouped = dwn.geometry(by_label["g32 3x3 s1 128ch 56^2"], "float32", "NCHW")
    assert grouped.weight_shape == (128, 4, 3, 3)
    # which layers move more than an H100's L2 (50 MiB): the large planes only
    over = {dtype: [label for label, layer in by_label.items()
                    if dwn.geometry(layer, dtype, "NCHW").bytes_moved(size) > H100_L2]
            for dtype, size in (("float32", 4), ("float16", 2))}
    assert over["float32"] == ["dw 3x3 s1 32ch 112^2", "dw 3x3 s2 96ch 112^2",
                               "dw 3x3 s1 144ch 56^2", "dw 3x3 s2 144ch 56^2",
                               "dw 5x5 s2 144ch 56^2", "g32 3x3 s1 128ch 56^2",
                               "g32 3x3 s2 256ch 56^2", "g32 3x3 s2 512ch 28^2"]
    assert over["float16"] == ["dw 3x3 s2 96ch 112^2", "dw 3x3 s1 144ch 56^2",
                               "g32 3x3 s2 256ch 56^2"]
    # the smallest layer (960 channels at 7^2, fp16, ~6 MB) still gets copies spanning 3x L2
    smallest = dwn.geometry(by_label["dw 3x3 s1 960ch 7^2"], "float16", "NCHW").bytes_moved(2)
    copies = mods_measure.rotation_copies(H100_L2, smallest, cap=dwn.ROTATION_CAP)
    assert copies < dwn.ROTATION_CAP and copies * smallest >= 3 * H100_L2


def test_pass_metrics(dwn):
    m = dwn.pass_metrics(0.05, 0.1, 100_000_000, 3e12)
    assert m["ratio"] == pytest.approx(2.0)
    assert m["GBps"] == pytest.approx(2000.0)
    assert m["frac_copy"] == pytest.approx(2e12 / 3e12)
    # 100 MB at 3 TB/s take 0.0333 ms: the peer's 0.1 ms is at most 3x slower
    assert m["ceiling"] == pytest.approx(3.0)


# ---------------------------------------------------------------------------------- options
def test_options(dwn, sweep):
    args = dwn.parse_args([])
    assert args.nets == list(dwn.NETS) and args.passes == list(dwn.PASSES)
    assert args.dtypes == ["float32", "float16", "bfloat16"] and args.layouts == ["NCHW", "NHWC"]
    assert args.repeat == 5 and not args.quick and args.targets == dwn.TARGETS
    args = dwn.parse_args(["--passes", "backward-weight,forward", "--quick", "--dtypes", "float16",
                           "--target-geomean", "1.5", "--target-copy-fraction", "0.7"])
    assert args.passes == ["forward", "backward-weight"] and args.repeat == 3
    assert args.dtypes == ["float16"]
    assert args.targets == {"geomean": 1.5, "min": 1.0, "copy_fraction": 0.7}
    assert dwn.parse_args(["--quick", "--repeat", "7"]).repeat == 7
    for bad in (["--nets", "resnet50"], ["--dtypes", "float64"], ["--passes", ""],
                ["--layouts", "NCDHW"], ["--repeat", "0"]):
        with pytest.raises(SystemExit) as exc:
            dwn.parse_args(bad)
        assert exc.value.code == 2, bad
    args = sweep.parse_args(["--layouts", "NHWC"])
    assert args.dtypes == ["float32", "float16"] and args.layouts == ["NHWC"] and args.repeat == 5
    with pytest.raises(SystemExit):
        sweep.parse_args(["--dtypes", "bfloat16"])


def test_results_names(dwn, tmp_path):
    assert dwn.results_stem("depthwise-nets", "NVIDIA H100 80GB HBM3", "abc1234", False) == \
        "depthwise-nets-NVIDIA_H100_80GB_HBM3-abc1234"
    assert dwn.results_stem("auto-sweep", "G", "c", True) == "auto-sweep-G-c-quick"
    path = dwn.write_results({"a": 1}, tmp_path / "new", "x-G-c", "text\n")
    assert path == tmp_path / "new" / "x-G-c.json" and json.loads(path.read_text()) == {"a": 1}
    assert (tmp_path / "new" / "x-G-c.md").read_text() == "text\n"


# ------------------------------------------------------------------------- timing helpers
def test_graph_rounds(mods):
    measure = mods["measure"]
    assert measure.graph_rounds(0.01) == 20      # 0.2 ms of work per replay
    assert measure.graph_rounds(0.2) == 1 and measure.graph_rounds(5.0) == 1
    assert measure.graph_rounds(0.0) == 64       # capped
    assert measure.graph_rounds(0.05, min_ms=1.0, cap=10) == 10


def test_rotated_graph_ms_warms_then_captures_whole_rounds(mods, monkeypatch):
    measure = mods["measure"]
    monkeypatch.setattr(measure, "synchronize", lambda: None)
    monkeypatch.setattr(measure, "graph_rounds", lambda ms: 3)
    calls, seen = [], {}

    def graph_ms(body, *, per_graph, repeat, target_ms):
        seen.update(per_graph=per_graph, repeat=repeat, target_ms=target_ms)
        calls.append("capture")
        assert len(body()) == per_graph
        return 6.0 / per_graph

    ms = measure.rotated_graph_ms(calls.append, ["a", "b"], graph_ms, repeat=4, target_ms=7.0)
    assert ms == pytest.approx(1.0)
    assert seen == {"per_graph": 6, "repeat": 4, "target_ms": 7.0}
    # two eager rounds (warm-up, sizing), then the captured rounds, each copy in turn
    assert calls == ["a", "b", "a", "b", "capture"] + ["a", "b"] * 3


def test_device_times_falls_back_to_events_for_all(mods, monkeypatch):
    measure = mods["measure"]
    monkeypatch.setattr(measure, "synchronize", lambda: None)
    monkeypatch.setattr(measure, "time_gpu", lambda fn, repeat: 9.0)

    def graph_ms(body, **kw):
        body()
        return 1.0

    def broken(body, **kw):
        raise RuntimeError("operation not permitted when stream is capturing")

    call = (lambda c: c, [1, 2], graph_ms)
    times, how, why = measure.device_times({"ours": call, "peer": call})
    assert (times, how, why) == ({"ours": 1.0, "peer": 1.0}, "graph", None)
    logged = []
    times, how, why = measure.device_times({"ours": call, "peer": (lambda c: c, [1], broken)},
                                           log=logged.append)
    assert times == {"ours": 9.0, "peer": 9.0} and how == "events"
    assert why == "RuntimeError: operation not permitted when stream is capturing"
    assert len(logged) == 1 and "capture failed" in logged[0]


# ------------------------------------------------------------------ summaries and reports
def _pass(ours_ms, peer_ms, nbytes, err=1e-7, ok=True, timing="graph"):
    from bench_depthwise_nets import pass_metrics

    return {**pass_metrics(ours_ms, peer_ms, nbytes, 3e12), "err": err, "ok": ok,
            "timing": timing}


def _row(dwn, entry, dtype, layout, passes, *, l2=H100_L2):
    nbytes = dwn.geometry(entry.layer, dtype, layout).bytes_moved(2 if dtype != "float32" else 4)
    return {"family": entry.family, "layer": entry.label, "first": entry.layer.name,
            "counts": dict(entry.counts), "uses": entry.uses, "dtype": dtype, "layout": layout,
            "bytes": nbytes, "larger_than_l2": nbytes > l2, "copies": 1,
            "auto_forward": "depthwise", "passes": passes}


def _fake_result(dwn):
    """A run over three depthwise layers (one of them over L2 in fp32) and one grouped layer."""
    by_label = {e.label: e for e in dwn.bench_layers()}
    big, small, k5 = (by_label[k] for k in ("dw 3x3 s1 144ch 56^2", "dw 3x3 s1 960ch 7^2",
                                            "dw 5x5 s1 1152ch 7^2"))
    rows = []
    for entry, ratio in ((big, 3.0), (small, 1.5), (k5, 0.5)):
        nbytes = dwn.geometry(entry.layer, "float32", "NCHW").bytes_moved(4)
        ours = nbytes / 2.4e12 * 1e3  # 80 % of the 3 TB/s copy rate
        rows.append(_row(dwn, entry, "float32", "NCHW", {
            "forward": _pass(ours, ratio * ours, nbytes),
            "backward-data": _pass(ours, 2 * ratio * ours, nbytes,
                                   err=0.5 if entry is k5 else 1e-7, ok=entry is not k5)}))
    g = by_label["g32 3x3 s1 256ch 28^2"]
    nbytes = dwn.geometry(g.layer, "float16", "NHWC").bytes_moved(2)
    rows.append(_row(dwn, g, "float16", "NHWC", {"forward": _pass(0.2, 0.1, nbytes,
                                                                 timing="events")}))
    rows[-1]["passes"]["forward"]["graph_error"] = "CUDARuntimeError: capture"
    result = {"benchmark": "depthwise_nets", "gpu": "NVIDIA H100 80GB HBM3", "l2_bytes": H100_L2,
              "cupy": "14", "torch": "2.11", "cudnn": 91900, "commit": "abc1234",
              "date": "2026-11-24 12:00:00", "copy_bandwidth_Bps": 3e12,
              "settings": {"batch": 32, "l2_factor": 3}, "targets": dict(dwn.TARGETS),
              "rows": rows}
    result["summary"] = dwn.summary(rows, result["targets"])
    return result


def test_summary_lines(dwn):
    result = _fake_result(dwn)
    lines = {(s["family"], s["dtype"], s["layout"], s["pass"]): s for s in result["summary"]}
    assert set(lines) == {("depthwise", "float32", "NCHW", "forward"),
                          ("depthwise", "float32", "NCHW", "backward-data"),
                          ("grouped", "float16", "NHWC", "forward")}
    fwd = lines[("depthwise", "float32", "NCHW", "forward")]
    assert fwd["layers"] == 3
    assert fwd["geomean"] == pytest.approx((3.0 * 1.5 * 0.5) ** (1 / 3))
    assert fwd["min"] == pytest.approx(0.5) and fwd["min_layer"] == "dw 5x5 s1 1152ch 7^2"
    # use-weighted: 144ch is used twice (both networks), 960ch 3x, 1152ch k5 3x
    rows = result["rows"][:3]
    ours = [r["passes"]["forward"]["ours_ms"] for r in rows]
    uses = [r["uses"] for r in rows]
    assert uses == [2, 3, 3]
    assert fwd["weighted"] == pytest.approx(
        sum(u * k * t for u, k, t in zip(uses, (3.0, 1.5, 0.5), ours))
        / sum(u * t for u, t in zip(uses, ours)))
    # only the 144ch 56^2 layer is over the L2 in fp32: the copy fraction is its own
    assert fwd["over_l2_layers"] == 1
    assert fwd["copy_geomean"] == pytest.approx(0.8) and fwd["copy_min"] == pytest.approx(0.8)
    assert fwd["mismatches"] == 0
    assert fwd["target"] == {"geomean": False, "min": False, "copy_fraction": True}
    # ours at 80 % of the copy rate everywhere: each ceiling is its ratio / 0.8
    assert fwd["ceiling_geomean"] == pytest.approx(fwd["geomean"] / 0.8)
    data = lines[("depthwise", "float32", "NCHW", "backward-data")]
    assert data["mismatches"] == 1 and data["geomean"] == pytest.approx(2 * fwd["geomean"])
    assert data["target"] == {"geomean": True, "min": True, "copy_fraction": True}
    grouped = lines[("grouped", "float16", "NHWC", "forward")]
    assert grouped["target"] is None and grouped["geomean"] == pytest.approx(0.5)
    assert grouped["over_l2_layers"] == 0 and grouped["copy_geomean"] is None
    assert dwn.verdict(fwd, dwn.TARGETS) == (
        "missed: geomean < 2.00x, min < 1.00x; geomean 2.00x out of reach (ceiling 1.64x)")
    assert dwn.verdict(data, dwn.TARGETS) == "met"  # (ceiling 3.28x)
    assert dwn.verdict({**fwd, "ceiling_geomean": None}, dwn.TARGETS) == (
        "missed: geomean < 2.00x, min < 1.00x")  # results from before the ceilings
    assert dwn.verdict(grouped, dwn.TARGETS) == "—"
    assert dwn.verdict({**fwd, "target": {"geomean": True, "min": True, "copy_fraction": None}},
                       dwn.TARGETS) == "met (copy: no layer)"


def test_markdown_flags_mismatches_targets_and_fallbacks(dwn):
    text = dwn.markdown(_fake_result(dwn))
    assert "| depthwise | **fp32 NCHW** | forward | 3 | 1.31x | 0.50x (dw 5x5 s1 1152ch 7^2) |" \
        in text
    assert "missed: geomean < 2.00x, min < 1.00x; geomean 2.00x out of reach" in text
    assert "| met |" in text
    assert "| 1.64x | 80 % / 80 % (1) |" in text  # the forward line's ceiling and copy cells
    assert "| grouped | fp16 NHWC | forward | 1 | 0.50x |" in text
    row = next(line for line in text.splitlines() if "| dw 5x5 s1 1152ch 7^2 |" in line)
    assert "**MISMATCH** (backward-data)" in row and "efficientnet_b0 3" in row
    big = next(line for line in text.splitlines() if "| dw 3x3 s1 144ch 56^2 |" in line)
    assert "mobilenetv2 1, efficientnet_b0 1" in big and "| yes |" in big and "| 80 % |" in big
    assert "g32 3x3 s1 256ch 28^2 fp16 NHWC forward: CUDARuntimeError: capture" in text
    assert "backward-weight" not in text.split("| family | layer |")[1].splitlines()[0]


def test_report_renders_both_results(dwn, sweep, mods, tmp_path):
    report = mods["report"]
    path = tmp_path / "depthwise-nets-G-c.json"
    path.write_text(json.dumps(_fake_result(dwn)))
    data = report.load(path)
    assert report.kind_of(data) == "depthwise_nets"
    text, fwd, bwd = report.markdown(data, path.name)
    assert text.startswith("### depthwise-nets-G-c.json") and "|---" in text and not fwd
    path = tmp_path / "auto-sweep-G-c.json"
    path.write_text(json.dumps(_fake_sweep(sweep)))
    data = report.load(path)
    assert report.kind_of(data) == "auto_sweep"
    text, _, _ = report.markdown(data, path.name)
    assert "| all | 3 | 2 (67 %) | 1 |" in text


# --------------------------------------------------------------------------------- sweep
def test_auto_verdict(sweep):
    assert sweep.auto_verdict({"auto": 1.05, "depthwise": 1.0, "direct": 3.0}) == (
        "depthwise", pytest.approx(1.05), True)
    best, over, within = sweep.auto_verdict({"auto": 2.0, "implicit_gemm": 1.0, "direct": 1.5})
    assert (best, over, within) == ("implicit_gemm", 2.0, False)
    assert sweep.auto_verdict({"auto": 1.0}) == (None, None, None)


def _sweep_row(sweep, layer, family, ms, picked, mismatch=(), failed=None):
    best, over, within = sweep.auto_verdict(ms)
    return {"family": family, "layer": layer, "counts": {}, "dtype": "float16", "layout": "NHWC",
            "bytes": 1, "copies": 8, "picked": picked, "ms": ms,
            "estimated_ms": {m: 0.01 for m in ms}, "err": {m: 1e-4 for m in ms if m != "auto"},
            "mismatch": list(mismatch), "refused": {"depthwise": "groups"} if family == "grouped"
            else {}, "failed": failed or {}, "best": best, "auto_over_best": over,
            "within": within, "timing": "graph"}


def _fake_sweep(sweep):
    rows = [_sweep_row(sweep, "dw 3x3 s1 144ch 56^2", "depthwise",
                       {"auto": 0.05, "depthwise": 0.049, "direct": 0.3}, "depthwise"),
            _sweep_row(sweep, "dw 5x5 s1 1152ch 7^2", "depthwise",
                       {"auto": 0.02, "depthwise": 0.02, "im2col_gemm": 0.01}, "depthwise",
                       mismatch=["im2col_gemm"]),
            _sweep_row(sweep, "g32 3x3 s1 256ch 28^2", "grouped",
                       {"auto": 0.5, "direct": 0.5, "implicit_gemm": 0.48}, "direct",
                       failed={"im2col_gemm": "OutOfMemoryError: no"})]
    return {"benchmark": "auto_sweep", "gpu": "G", "l2_bytes": H100_L2, "commit": "c",
            "date": "d", "settings": {"batch": 32, "l2_factor": 3}, "rows": rows,
            "summary": sweep.sweep_summary(rows)}


def test_sweep_summary_and_markdown(sweep):
    result = _fake_sweep(sweep)
    s = result["summary"]
    assert list(s) == ["all", "depthwise", "grouped"]
    assert (s["all"]["problems"], s["all"]["within"], s["all"]["picked_fastest"]) == (3, 2, 1)
    assert s["all"]["fraction_within"] == pytest.approx(2 / 3)
    assert s["all"]["worst"] == {"layer": "dw 5x5 s1 1152ch 7^2", "dtype": "float16",
                                 "layout": "NHWC", "picked": "depthwise", "best": "im2col_gemm",
                                 "auto_over_best": pytest.approx(2.0)}
    assert s["grouped"]["within"] == 1 and s["grouped"]["picked_fastest"] == 0
    text = sweep.markdown(result)
    assert "| depthwise | 2 | 1 (50 %) | 1 | 2.00x (dw 5x5 s1 1152ch 7^2 fp16 NHWC: ran " \
        "depthwise, fastest im2col_gemm) |" in text
    assert "| depthwise ms (est) | direct ms (est) | im2col_gemm ms (est) | implicit_gemm ms " \
        "(est) |" in text
    row = next(line for line in text.splitlines() if "| dw 5x5 s1 1152ch 7^2 |" in line)
    assert "2.00x **off**" in row and "**MISMATCH** im2col_gemm (1.0e-04)" in row
    row = next(line for line in text.splitlines() if "| g32 3x3 s1 256ch 28^2 |" in line)
    assert "depthwise (refused), im2col_gemm (failed)" in row
    assert "**FAILED** im2col_gemm: OutOfMemoryError: no" in row
    assert "| — |" in row  # no depthwise time for the grouped layer
    assert sweep.sweep_summary([]) == {}
