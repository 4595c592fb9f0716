"""benchmarks/report.py on the committed results files (CPU only)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_committed_results_file_renders(report, path):
    text, fwd, bwd = report.markdown(report.load(path), path.name)
    assert text.startswith("### ") and "|---" in text
    for m in fwd:
        assert m["ms"] > 0 and m["tflops"] > 0
        assert 0 < m["flop_frac"] < 1.5 and 0 < m["bw_frac"] < 1.5  # H200 table ceilings


def test_forward_table_has_ratios_and_ceilings(report):
    path = ROOT / "benchmarks" / "results" / "forward-NVIDIA_H200-737b9de.json"
    text, fwd, bwd = report.markdown(report.load(path), path.name)
    assert "x cuDNN fp32" in text and "% FLOP ceiling" in text and "4.27 TB/s" in text
    res2 = next(m for m in fwd if m["problem"] == "res2 3x3 64")
    assert res2["ratios"]["cudnn_fp32"] == pytest.approx(1.0526, rel=1e-3)
    assert res2["tflops"] == pytest.approx(7.398752256 / 0.2561280012130738, rel=1e-6)
    assert len(bwd) == 4


def test_plots_and_markdown_files(report, tmp_path):
    pytest.importorskip("matplotlib")
    src = ROOT / "benchmarks" / "results" / "forward-NVIDIA_H200-737b9de.json"
    out = tmp_path / "report.md"
    assert report.main([str(src), "--plots", str(tmp_path), "--out", str(out)]) == 0
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["forward-NVIDIA_H200-737b9de-ceilings.png",
                    "forward-NVIDIA_H200-737b9de-peers.png"]
    assert "](forward-NVIDIA_H200-737b9de-peers.png)" in out.read_text()


def test_without_matplotlib_the_report_is_markdown_only(report, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    src = ROOT / "benchmarks" / "results" / "backward-NVIDIA_H200-c368a31.json"
    assert report.main([str(src), "--plots", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "matplotlib is not installed" in captured.err
    assert "| res3 3x3 128 |" in captured.out
    assert not list(tmp_path.glob("*.png"))


def test_a_file_that_is_not_a_results_file_is_a_usage_error(report, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(SystemExit) as exc:
        report.main([str(bad), "--no-plots"])
    assert exc.value.code == 2


# ------------------------------------------------------------------ issue 15: fake results files
def _network_json(torch=True):
    """A bench_network.py result: resnet50 batch 1 in float32 and float16 (two cupyconv layouts)."""
    def peer(wall, graph, tf32=False, cl=False):
        return {"wall_ms": wall, "graph_ms": graph, "tf32": tf32, "channels_last": cl}

    fp32 = {"network": "resnet50", "batch": 1, "dtype": "float32", "layers": 53, "gflop": 8.17,
            "pass_bytes": 136469248, "copies": 2, "working_set_bytes": 272938496,
            "cupyconv": {"NCHW": {"wall_ms": 2.0, "graph_ms": 1.0, "first_pass_s": 9.0,
                                  "max_err": 3e-7}},
            "peers": {"cudnn_fp32": peer(3.0, 1.5), "cudnn_tf32": peer(2.5, 0.5, tf32=True)},
            "ratios": {"NCHW": {"wall": {"cudnn_fp32": 1.5, "cudnn_tf32": 1.25},
                                "graph": {"cudnn_fp32": 1.5, "cudnn_tf32": 0.5}}}}
    fp16 = {"network": "resnet50", "batch": 1, "dtype": "float16", "layers": 53, "gflop": 8.17,
            "pass_bytes": 68234624, "copies": 3, "working_set_bytes": 204703872,
            "cupyconv": {"NCHW": {"wall_ms": 2.0, "graph_ms": 0.8, "max_err": 2e-4},
                         "NHWC": {"wall_ms": 1.6, "graph_ms": 0.4, "max_err": 2e-4}},
            "peers": {"cudnn_fp16": peer(2.0, 0.4), "cudnn_fp16_cl": peer(1.6, 0.2, cl=True)},
            "ratios": {"NCHW": {"wall": {"cudnn_fp16": 1.0, "cudnn_fp16_cl": 0.8},
                                "graph": {"cudnn_fp16": 0.5, "cudnn_fp16_cl": 0.25}},
                       "NHWC": {"wall": {"cudnn_fp16": 1.25, "cudnn_fp16_cl": 1.0},
                                "graph": {"cudnn_fp16": 1.0, "cudnn_fp16_cl": 0.5}}}}
    if not torch:
        for row in (fp32, fp16):
            row["peers"] = row["ratios"] = None
            for ours in row["cupyconv"].values():
                ours.pop("max_err")
    return {"benchmark": "network", "gpu": "NVIDIA H100 80GB HBM3", "l2_bytes": 52428800,
            "cupy": "14.2.0", "torch": "2.11.0" if torch else None,
            "cudnn": 91500 if torch else None, "python": "3.12.3", "commit": "abc1234",
            "date": "2026-12-01 10:00:00",
            "settings": {"repeat": 5, "target_ms": 60.0, "l2_factor": 3, "max_copies": 8,
                         "cudnn_benchmark": torch},
            "peer_labels": {}, "rows": [fp32, fp16], "seconds": 50.0}


def _host_json():
    def row(op, host, graph=1.5, peer=False, error=None):
        return {"op": op, "call": f"{op}(...)", "peer": peer, "host_us": host,
                "host_us_loops": [host] * 7, "meets_target": None if peer else host <= 15,
                "graph_us": None if error else graph, "graph_error": error}

    return {"benchmark": "host", "gpu": "NVIDIA H100 80GB HBM3", "l2_bytes": 52428800,
            "cupy": "14.2.0", "torch": "2.11.0", "cudnn": 91500, "python": "3.12.3",
            "commit": "abc1234", "date": "2026-12-01 10:00:00", "target_us": 15.0, "loops": 7,
            "calls": 50, "graph_calls": 100,
            "rows": [row("conv 3x3 NCHW implicit_gemm", 12.5), row("conv_transpose s2", 48.0),
                     row("signal.correlate2d 64x64 3x3 same", 20.0,
                         error="RuntimeError: capture failed"),
                     row("torch F.conv2d 3x3 NCHW", 9.0, graph=2.0, peer=True)],
            "summary": {"meeting_target": 1, "rows": 3, "median_host_us": 20.0}}


def test_network_results_render_per_dtype(report, tmp_path):
    data = _network_json()
    assert report.kind_of(data) == "network"
    text, fwd, bwd = report.markdown(data, "network-H100-abc1234.json")
    assert (fwd, bwd) == ([], [])
    assert text.startswith("### network-H100-abc1234.json: NVIDIA H100 80GB HBM3, commit abc1234, "
                           "2026-12-01 10:00:00")
    assert "| network (float32) | batch | layout | copies | wall ms | graph ms | cuDNN fp32 wall ms |" in text
    assert "| resnet50 | 1 | NCHW | 2 | 2.000 | 1.000 | 3.000 | 1.50 | 1.500 | 1.50 | 2.500 | 1.25 | 0.500 | 0.50 | 3.0e-07 |" in text
    assert "| network (float16) |" in text and "cuDNN fp16 CL graph ms" in text
    assert "| resnet50 | 1 | NHWC | 3 | 1.600 | 0.400 | 2.000 | 1.25 | 0.400 | 1.00 | 1.600 | 1.00 | 0.200 | 0.50 | 2.0e-04 |" in text
    assert "the L2 of 50 MiB" in text and "cuDNN 91500" in text
    # geomean over the two float16 layouts: sqrt(1.0 * 1.25) for cuDNN fp16 by wall time
    assert f"cuDNN fp16 {(1.0 * 1.25) ** 0.5:.2f}x (wall)" in text
    src = tmp_path / "network-H100-abc1234.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "report.md"
    assert report.main([str(src), "--out", str(out), "--plots", str(tmp_path)]) == 0
    assert out.read_text().startswith("### network-H100-abc1234.json")
    assert not list(tmp_path.glob("*.png"))


def test_network_results_without_torch_render(report):
    text, _, _ = report.markdown(_network_json(torch=False), "n.json")
    row = next(line for line in text.splitlines() if line.startswith("| resnet50 | 1 | NCHW |"))
    assert row == "| resnet50 | 1 | NCHW | 2 | 2.000 | 1.000 | — | — | — | — | — | — | — | — | — |"
    assert "Geomean" not in text


def test_host_results_render_with_target(report, tmp_path):
    data = _host_json()
    assert report.kind_of(data) == "host"
    text, fwd, bwd = report.markdown(data, "host-H100-abc1234.json")
    assert (fwd, bwd) == ([], [])
    assert "commit abc1234, 2026-12-01 10:00:00" in text.splitlines()[0]
    assert "| op | call | host µs | <= 15 µs | graph µs |" in text
    assert "| conv 3x3 NCHW implicit_gemm | `conv 3x3 NCHW implicit_gemm(...)` | 12.5 | yes | 1.50 |" in text
    assert "| conv_transpose s2 | `conv_transpose s2(...)` | 48.0 | no | 1.50 |" in text
    assert "| 20.0 | no | — (not capturable) |" in text
    assert "| torch F.conv2d 3x3 NCHW (reference) | `torch F.conv2d 3x3 NCHW(...)` | 9.0 | — | 2.00 |" in text
    assert "1 of 3 cupyconv rows meet 15 µs." in text
    src = tmp_path / "host.json"
    src.write_text(json.dumps(data))
    assert report.main([str(src), "--no-plots"]) == 0


def test_forward_run_with_fp16_and_wall_times_renders_them(report):
    data = json.loads((ROOT / "benchmarks" / "results" / "forward-NVIDIA_H200-737b9de.json").read_text())
    data["settings"] = {"cudnn_benchmark": True, "l2_factor": 3, "max_copies": 8}
    for row in data["forward"]:
        row["wall_ms"] = {k: 2 * v for k, v in row["ms"].items()}
        row["wall_ms"]["cudnn_fp32"] *= 1.5
    res2 = next(r for r in data["forward"] if r["problem"] == "res2 3x3 64")
    res2["fp16"] = {"ms": {"auto": 0.2, "auto_nhwc": 0.1, "cudnn_fp16": 0.3, "cudnn_fp16_cl": 0.05},
                    "wall_ms": {}, "err": {"auto": 4e-4}}
    text, fwd, _ = report.markdown(data, "f.json")
    assert "cuDNN autotuned (cudnn.benchmark True)" in text
    assert "| problem (float32, batch 32 unless noted) | ms | wall ms | TFLOP/s |" in text
    m = next(m for m in fwd if m["problem"] == "res2 3x3 64")
    assert m["wall_ms"] == pytest.approx(2 * res2["ms"]["auto"])
    # every wall time is twice the device time, cuDNN fp32's three times: 1.5x the device ratios
    device = report._geomean([m["ratios"].get("cudnn_fp32") for m in fwd])
    assert f"By wall time (a loop of calls ending in a synchronize): {1.5 * device:.2f}x cuDNN fp32" in text
    assert ("| res2 3x3 64 | 0.200 | 0.100 | 0.300 | 0.050 | 1.50 | 0.50 | 0.50 | 4.0e-04 |"
            in text)
    assert text.count("| problem (float16) |") == 1
