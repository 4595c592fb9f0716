"""The pure parts of the issue-15 benchmark scripts (CPU only): rotation over L2, timed-loop
sizes, ratios and summaries, the rows' bookkeeping; the GPU parts run on a device only."""

import importlib
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_modules():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield {name: importlib.import_module(name)
               for name in ("measure", "bench", "bench_network", "bench_host", "networks")}
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def measure(bench_modules):
    return bench_modules["measure"]


def test_rotation_copies_span_three_l2_capped_at_eight(measure):
    l2 = 50 * 2 ** 20
    assert measure.rotation_copies(l2, 3 * l2) == 1          # already 3x L2: no rotation needed
    assert measure.rotation_copies(l2, 3 * l2 + 1) == 1
    assert measure.rotation_copies(l2, l2) == 3
    assert measure.rotation_copies(l2, l2 // 2) == 6
    assert measure.rotation_copies(l2, 2 ** 10) == 8         # capped
    assert measure.rotation_copies(l2, 0) == 1
    assert measure.rotation_copies(l2, l2, cap=2) == 2
    for nbytes in (10 ** 5, 10 ** 6, 10 ** 7, 10 ** 8):
        r = measure.rotation_copies(l2, nbytes)
        assert r == 8 or r * nbytes >= 3 * l2                 # spans 3x L2 unless capped
        assert r == 1 or (r - 1) * nbytes < 3 * l2             # and no more copies than that


def test_rotation_of_the_network_passes_on_an_h100(measure, bench_modules):
    networks = bench_modules["networks"]
    l2 = 50 * 2 ** 20  # the H100's 50 MiB
    copies = {(net, batch, item): measure.rotation_copies(
        l2, networks.pass_bytes(build(), batch, item))
        for net, build in networks.NETWORKS.items() for batch in (1, 32) for item in (4, 2)}
    assert copies[("resnet50", 1, 4)] == 2 and copies[("resnet50", 1, 2)] == 3
    assert copies[("mobilenetv2", 1, 4)] == 5 and copies[("mobilenetv2", 1, 2)] == 8
    assert all(copies[(net, 32, item)] == 1 for net in networks.NETWORKS for item in (4, 2))


def test_loop_count(measure):
    assert measure.loop_count(50, 1.0) == 50
    assert measure.loop_count(50, 1.0, multiple=3) == 51
    assert measure.loop_count(50, 100.0) == 1
    assert measure.loop_count(50, 100.0, multiple=4) == 4     # at least one round of copies
    assert measure.loop_count(50, 0.0) == 10_000              # capped
    assert measure.loop_count(50, 0.001, hi=1000, multiple=8) == 1000


def test_ratio_geomean_rotating(measure):
    assert measure.ratio(3.0, 2.0) == 1.5
    assert measure.ratio(None, 2.0) is None and measure.ratio(1.0, None) is None
    assert measure.ratio(1.0, 0.0) is None
    assert measure.geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert measure.geomean([None]) is None
    seen = []
    fn = measure.rotating(seen.append, ["a", "b", "c"])
    for _ in range(7):
        fn()
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]


def test_wall_ms_loops_whole_rounds_and_ends_each_in_a_sync(measure):
    events = []
    fn = measure.rotating(lambda i: events.append(i), range(3))
    ms = measure.wall_ms(fn, multiple=3, repeat=4, target_ms=0.001,
                         sync=lambda: events.append("sync"))
    assert ms >= 0
    calls = [e for e in events if e != "sync"]
    # one estimate call, then 4 loops of one round of the 3 copies, each loop ended by a sync
    assert len(calls) == 1 + 4 * 3
    assert events[-1] == "sync" and events[-2] != "sync"
    assert calls[1:4] == [1, 2, 0]


def test_replay_ms_divides_by_launches(measure):
    clock = {"t": 0.0}

    def launch():
        clock["t"] += 2.0  # 2 ms per launch

    def events():
        marks = {}
        return ((lambda: marks.__setitem__("start", clock["t"])),
                (lambda: marks.__setitem__("stop", clock["t"])),
                (lambda: marks["stop"] - marks["start"]))

    assert measure._replay_ms(launch, events, repeat=3, target_ms=10) == pytest.approx(2.0)


def test_network_ratios_and_peers(bench_modules):
    bn = bench_modules["bench_network"]
    assert bn.layouts_for("float32") == ("NCHW",)
    assert bn.layouts_for("float16") == ("NCHW", "NHWC")
    assert bn.peers_for("float32") == ["cudnn_fp32", "cudnn_tf32"]
    assert bn.peers_for("float16") == ["cudnn_fp16", "cudnn_fp16_cl"]
    assert not bn.PEERS["cudnn_fp32"][1] and bn.PEERS["cudnn_tf32"][1]   # TF32 off / on
    assert bn.PEERS["cudnn_fp16_cl"][2] and not bn.PEERS["cudnn_fp16"][2]  # channels_last
    ours = {"wall_ms": 2.0, "graph_ms": 1.0}
    peers = {"cudnn_fp32": {"wall_ms": 3.0, "graph_ms": 0.5}, "cudnn_tf32": {"wall_ms": 1.0}}
    r = bn.ratios(ours, peers)
    assert r["wall"] == {"cudnn_fp32": 1.5, "cudnn_tf32": 0.5}
    assert r["graph"] == {"cudnn_fp32": 0.5, "cudnn_tf32": None}
    assert bn.ratios(ours, None) is None


def test_host_target_and_table(bench_modules):
    bh = bench_modules["bench_host"]
    assert bh.meets_target(15.0) is True and bh.meets_target(15.1) is False
    assert bh.meets_target(None) is None
    rows = [{"op": "conv", "peer": False, "host_us": 12.0, "meets_target": True, "graph_us": 1.5},
            {"op": "F.conv2d", "peer": True, "host_us": 9.0, "meets_target": None, "graph_us": None}]
    lines = bh.table(rows).splitlines()
    assert lines[0].split()[:3] == ["op", "host", "µs"]
    assert lines[1].split() == ["conv", "12.0", "yes", "1.50"]
    assert lines[2].split() == ["F.conv2d", "(peer)", "9.0", "—", "—"]


def test_foreign_rows_table(bench_modules):
    bh = bench_modules["bench_host"]
    rows = [{"op": "conv", "input": "torch", "host_us": 18.0, "cupy_host_us": 16.0,
             "ratio": 1.125, "meets_target": True},
            {"op": "conv", "input": "numba", "host_us": 20.0, "cupy_host_us": 16.0,
             "ratio": 1.25, "meets_target": False},
            {"op": "conv bf16", "input": "numba", "host_us": None, "cupy_host_us": None,
             "ratio": None, "meets_target": None}]
    lines = bh.foreign_table(rows).splitlines()
    assert lines[0].split() == ["op", "input", "µs", "CuPy", "µs", "ratio", "<=", "1.2"]
    assert lines[1].split() == ["conv", "torch", "18.0", "16.0", "1.12", "yes"]
    assert lines[2].split() == ["conv", "numba", "20.0", "16.0", "1.25", "no"]
    assert lines[3].split() == ["conv", "bf16", "numba", "—"]


def test_bench_peer_summary(bench_modules):
    bench = bench_modules["bench"]
    rows = [{"ms": {"auto": 1.0, "cudnn_fp32": 2.0, "cudnn_tf32": 0.5, "im2col_matmul": 4.0},
             "wall_ms": {"auto": 2.0, "cudnn_fp32": 2.0},
             "fp16": {"ms": {"auto": 1.0, "auto_nhwc": 0.5, "cudnn_fp16": 1.0, "cudnn_fp16_cl": 0.25},
                      "wall_ms": {}}},
            {"ms": {"auto": 2.0, "cudnn_fp32": 8.0, "cudnn_tf32": 1.0},
             "wall_ms": {"auto": 2.0, "cudnn_fp32": 4.0}}]
    s = bench.peer_summary(rows)
    assert s["ms"]["float32"]["auto/cudnn_fp32"] == pytest.approx(math.sqrt(2 * 4))
    assert s["ms"]["float32"]["auto/cudnn_tf32"] == pytest.approx(0.5)
    assert s["ms"]["float32"]["auto/im2col_matmul"] == pytest.approx(4.0)
    assert s["wall_ms"]["float32"]["auto/cudnn_fp32"] == pytest.approx(math.sqrt(1 * 2))
    assert s["wall_ms"]["float32"]["auto/cudnn_tf32"] is None
    assert s["ms"]["float16"] == {"auto/cudnn_fp16": 1.0, "auto/cudnn_fp16_cl": 0.25,
                                  "auto_nhwc/cudnn_fp16": 2.0, "auto_nhwc/cudnn_fp16_cl": 0.5}
    assert all(v is None for v in s["wall_ms"]["float16"].values())
