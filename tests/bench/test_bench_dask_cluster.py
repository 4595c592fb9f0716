"""The pure parts of bench_dask_cluster.py (issue 20; CPU only): options, the scaling efficiency
and the report of a fake two-GPU run."""

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bc():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("bench_dask_cluster")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_options(bc):
    args = bc.parse_args([])
    assert (args.gpus, args.size, args.chunk, args.images) == ([1, 2], 1024, 256, 65536)
    assert args.ops == ["gaussian_filter", "correlate"] and args.layers == list(bc.LAYERS)
    args = bc.parse_args(["--gpus", "1,2,4", "--layers", "res2 3x3 64", "--images", "0"])
    assert (args.gpus, args.layers, args.images) == ([1, 2, 4], ["res2 3x3 64"], 0)
    assert args.protocol == "tcp" and bc.parse_args(["--protocol", "ucx"]).protocol == "ucx"
    assert (args.pinned, args.rmm_pool_size) == (False, None)
    assert (args.rmm_for_cupy, args.message_bytes_limit) == (False, None)
    args = bc.parse_args(["--pinned", "--rmm-pool-size", "8GB", "--rmm-for-cupy",
                          "--message-bytes-limit", "1GB"])
    assert (args.pinned, args.rmm_pool_size) == (True, "8GB")
    assert (args.rmm_for_cupy, args.message_bytes_limit) == (True, "1GB")
    assert bc.settings_stem(args) == "dask-cluster-1024-chunk256-rmm-pool-cupy-pinned-msg1GB"
    assert bc.settings_stem(bc.parse_args(["--size", "2048", "--chunk", "512", "--protocol",
                                           "ucx"])) == "dask-cluster-2048-chunk512-ucx"
    for bad in (["--gpus", "0,2"], ["--gpus", ""], ["--ops", "sobel"], ["--layers", "vgg"],
                ["--protocol", "nvlink"]):
        with pytest.raises(SystemExit):
            bc.parse_args(bad)


def test_efficiency_and_report(bc):
    volume = [{"gpus": g, "problem": "p", "bytes": 8, "placing_s": 0.1, "err": 1e-7,
               "halo": halo, "cupyconv_GBps": rate, "dask-image_GBps": rate / 3}
              for g, rate, halo in ((1, 100.0, "chunks"), (2, 180.0, "placed"))]
    volume[1]["cupyconv_unplaced_GBps"] = 40.0
    convs = [{"gpus": g, "layer": "res2 3x3 64", "images": 64, "generation_s": 0.1, "s": 1.0,
              "img_per_s": rate} for g, rate in ((1, 1000.0), (2, 1500.0))]
    for lib in ("cupyconv", "dask-image"):
        bc.efficiencies(volume, "problem", f"{lib}_GBps")
    bc.efficiencies(convs, "layer", "img_per_s")
    assert volume[1]["cupyconv_GBps_efficiency"] == pytest.approx(0.9)
    assert volume[0]["cupyconv_GBps_efficiency"] == pytest.approx(1.0)
    assert convs[1]["img_per_s_efficiency"] == pytest.approx(0.75)
    result = {"gpu": "H200", "commit": "abc1234",
              "settings": {"gpus": [1, 2], "repeat": 3, "images": 64, "image_chunk": 16},
              "volume_rows": volume, "conv_rows": convs}
    text = bc.markdown(result)
    assert "H200 x 2 (commit abc1234)" in text and "unoptimized" not in text
    result["settings"].update(pinned=True, rmm_pool_size="8GB", protocol="ucx")
    assert "UCX, RMM pool 8GB, one" in bc.markdown(result)
    assert "unoptimized" in bc.markdown(result)
    result["settings"].update(rmm_for_cupy=True, message_bytes_limit="1GB")
    assert "UCX, RMM pool 8GB, CuPy on RMM, messages up to 1GB, one thread" in bc.markdown(result)
    assert "| p | 2 | 180.0 | 90% | placed | 40.0 | 60.0 | 90% | 3.00x | 1.0e-07 |" in text
    assert "| p | 1 | 100.0 | 100% | chunks | - | 33.3 | 100% | 3.00x | 1.0e-07 |" in text
    assert "| res2 3x3 64 | 2 | 1500 | 75% |" in text
