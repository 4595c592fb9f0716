"""benchmarks/report.py on the committed results files (CPU only)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
