"""The pure parts of bench_dask.py (issue 19; CPU only): options, problems, per-chunk seeds, the
chunk-by-chunk volume (with NumPy chunks), the discarding sink, a row and the report of a fake
run, and the exit status without dask-image."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bd():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("bench_dask")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_options_and_problems(bd):
    args = bd.parse_args([])
    assert (args.size, args.chunk, args.repeat, args.scheduler) == (512, 128, 3, "threads")
    assert args.ops == ["gaussian_filter", "correlate"]
    args = bd.parse_args(["--size", "64", "--chunk", "100", "--ops", "correlate", "--repeat", "1"])
    assert (args.chunk, args.repeat, args.ops) == (64, 1, ["correlate"])
    with pytest.raises(SystemExit):
        bd.parse_args(["--ops", "sobel"])
    with pytest.raises(SystemExit):
        bd.parse_args(["--size", "0"])
    ps = bd.problems(size=2048, chunk=256)
    assert [p.label for p in ps] == ["2048^3 gaussian_filter sigma=2 chunks 256^3",
                                     "2048^3 correlate k=7 chunks 256^3"]
    assert [p.halo for p in ps] == [8, 3]
    assert ps[0].nbytes == 2 * 4 * 2048 ** 3  # 64 GiB moved: the out-of-core case


def test_volume_is_generated_chunk_by_chunk_and_reproducibly(bd):
    pytest.importorskip("dask.array")
    v = bd.random_volume(20, 8, np)
    assert v.chunks == ((8, 8, 4),) * 3 and v.dtype == np.float32
    a, b = v.compute(scheduler="synchronous"), v.compute(scheduler="threads")
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and -1 <= a.min() and a.max() < 1
    assert not np.array_equal(a[:8, :8, :8], a[8:16, :8, :8])  # chunks differ
    assert bd.block_seed("volume", (0, 1, 2)) == bd.block_seed("volume", [0, 1, 2])
    sink = bd.discard(v)
    assert sink.shape == (3, 3, 3)
    np.testing.assert_array_equal(sink.compute(), a[::8, ::8, ::8])
    w = bd.dense_weights()
    assert w.shape == (7, 7, 7) and w.dtype == np.float32
    np.testing.assert_array_equal(w, bd.dense_weights())


def test_the_cupyconv_graph_filters_the_volume_on_a_cpu(bd):
    """The benchmark's cupyconv.dask graph with NumPy chunks equals SciPy on the whole volume."""
    pytest.importorskip("dask.array")
    import scipy.ndimage as sn

    import cupyconv.dask as cd

    v = bd.random_volume(24, 10, np)
    a = v.compute()
    got = cd.correlate(v, bd.dense_weights()).compute()
    np.testing.assert_allclose(got, sn.correlate(a, bd.dense_weights()), rtol=1e-5, atol=1e-5)


def test_row_and_report(bd):
    p = bd.problems(size=512, chunk=128)[0]
    row = bd.row_of(p, {"cupyconv": 1.5, "dask-image": 3.0}, 0.5, 2e-6)
    assert row["cupyconv_net_s"] == 1.0 and row["dask-image_net_s"] == 2.5
    assert row["ratio"] == 2.5 and row["ok"]
    assert row["cupyconv_GBps"] == pytest.approx(8 * 512 ** 3 / 1e9)
    bad = bd.row_of(p, {"cupyconv": 1.0, "dask-image": 1.0}, 0.0, 1e-2)
    assert not bad["ok"]
    result = {"gpu": "NVIDIA H100", "commit": "abc1234", "date": "2026-01-01", "cupy": "13",
              "dask": "2026.8.0", "dask_image": "2025.1",
              "settings": {"size": 512, "chunk": 128, "scheduler": "threads", "workers": 4,
                           "repeat": 3},
              "rows": [row, bad]}
    text = bd.markdown(result)
    assert "| 512^3 gaussian_filter sigma=2 chunks 128^3 | 8 |" in text
    assert "2.50x" in text and text.count("MISMATCH") == 1
    assert bd.max_rel_diff(np.ones(3), np.ones(3)) == 0
    assert bd.max_rel_diff(np.ones(3), np.ones(4)) == float("inf")


def test_missing_dask_image_exits_with_2(bd, capsys):
    pytest.importorskip("dask.array")  # (the message names only the missing one beside it)
    with pytest.raises(SystemExit) as exc:
        bd.require_libraries(("dask.array", "surely_not_a_module_dask_image_x.ndfilters"))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bench_dask needs surely-not-a-module-dask-image-x" in err
    assert "pip install" in err
    bd.require_libraries(("dask.array",))  # present: no exit


def test_conv_options_and_report_sections(bd):
    args = bd.parse_args(["--layers", "res2 3x3 64,res4 3x3 256", "--images", "500",
                          "--host-size", "64"])
    assert args.layers == ["res2 3x3 64", "res4 3x3 256"] and args.images == 500
    assert bd.parse_args([]).layers[0] == "resnet50 conv1 7x7 s2"
    with pytest.raises(SystemExit):
        bd.parse_args(["--layers", "res9"])
    with pytest.raises(SystemExit):
        bd.parse_args(["--images", "-1"])
    image, wshape, opts = bd.conv_problem("resnet50 conv1 7x7 s2")
    assert image == (3, 224, 224) and wshape == (64, 3, 7, 7)
    assert opts == dict(stride=2, padding=3, dilation=1, groups=1)
    p = bd.problems(size=512, chunk=128)[0]
    row = bd.row_of(p, {"cupyconv": 1.5, "dask-image": 3.0}, 0.5, 2e-6)
    row.update(in_memory_GBps={"cupyconv": 400.0, "cupyx": 80.0}, streamed_fraction=0.025)
    conv = {"layer": "res2 3x3 64", "images": 500, "chunk": 128,
            "cupyconv.dask_img_per_s": 9000.0, "cupyconv loop_img_per_s": 10000.0,
            "dask_efficiency": 0.9, "torch loop_img_per_s": 12000.0}
    result = {"gpu": "NVIDIA H100", "commit": "abc1234", "date": "2026-01-01", "cupy": "13",
              "dask": "2026.8.0", "dask_image": "2025.1",
              "settings": {"size": 512, "chunk": 128, "scheduler": "threads", "workers": 4,
                           "repeat": 3},
              "rows": [row], "conv_rows": [conv],
              "host_out_of_core": {"shape": [64, 1024, 1024], "chunks": [128, 256, 256],
                                   "s": 0.5, "GBps": 1.1}}
    text = bd.markdown(result)
    assert "| 400.0 | 80.0 | 2.5% |" in text
    assert "| res2 3x3 64 | 9000 | 10000 | 90% | 12000 |" in text
    assert "1.1 GB/s" in text

