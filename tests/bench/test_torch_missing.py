"""Benchmarks without PyTorch: a peer-only script says so in one line and exits with 2; the others
say once that the peer columns are left out."""

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def measure_without_torch(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    import measure

    return measure


def test_require_torch_is_one_line_and_status_2(measure_without_torch, capsys):
    with pytest.raises(SystemExit) as exc:
        measure_without_torch.require_torch("bench_x")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bench_x needs PyTorch" in err and "pip install torch" in err


def test_load_torch_notes_the_missing_peer_once(measure_without_torch, capsys):
    assert measure_without_torch.load_torch() is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PyTorch is not installed" in err
    assert measure_without_torch.load_torch(quiet=True) is None
    assert capsys.readouterr().err == ""
