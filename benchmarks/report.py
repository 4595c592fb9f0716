"""Benchmark report: a results JSON of ``bench.py`` as Markdown tables and PNG plots.

    python3 benchmarks/report.py benchmarks/results/forward-NVIDIA_H200-737b9de.json \
        [more.json ...] [--out report.md] [--plots DIR] [--no-plots]

Markdown (stdout or ``--out``): forward problems with ms, TFLOP/s, GB/s, the fractions of the
device ceilings and the ratio to each peer (cuDNN fp32 / TF32, im2col + cupy.matmul; > 1:
cupyconv faster); backward-data and backward-weight against cuDNN; the GEMM against cuBLAS.
Results of bench_depthwise.py (GB/s of the copy rate, ratios to cuDNN), bench_signal.py (ratios
to CuPy's routines), calibrate_signal.py, bench_network.py (whole-network passes: wall and
CUDA-graph ms against cuDNN fp32 / TF32 / fp16 NCHW / fp16 channels_last), bench_host.py
(host µs per warm call against the 15 µs target), and bench_precision.py,
bench_depthwise_nets.py and experiments/sweep_auto.py (through those scripts' own tables) render
too.  bench.py's float16 columns and wall times, where the run has them, get a table and a
column of their own.
Plots (``DIR``, default: next to the JSON): ``<name>-peers.png`` (ratio to each peer per problem)
and ``<name>-ceilings.png`` (achieved fraction of the FLOP and copy-bandwidth ceilings).

Ceilings come from the JSON's ``ceilings`` (written by bench.py since the profiler landed), else
from ``cupyconv._cli.ceilings.TABLE`` by GPU name; without either the percentage columns are left out.
matplotlib is optional (``pip install 'cupyconv[bench]'``): without it the report is Markdown only,
with a note on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cupyconv._cli.ceilings import table_ceilings  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402

PEERS = {"cudnn_fp32": "cuDNN fp32", "cudnn_tf32": "cuDNN TF32", "im2col_matmul": "im2col+matmul"}


def kind_of(data) -> str | None:
    """Which benchmark wrote ``data``: "bench" (bench.py), "depthwise" (bench_depthwise.py),
    "signal" (bench_signal.py), "calibration" (calibrate_signal.py), "network"
    (bench_network.py), "host" (bench_host.py), "precision" (bench_precision.py),
    "depthwise_nets" (bench_depthwise_nets.py), "auto_sweep" (experiments/sweep_auto.py), "ndimage"
    (bench_ndimage.py), "dask" (bench_dask.py), "dask-cluster" (bench_dask_cluster.py), "cold"
    (bench_cold.py), "train_step" (bench_train_step.py), or None."""
    if not isinstance(data, dict):
        return None
    if data.get("benchmark") == "dask-cluster" and isinstance(data.get("volume_rows"), list):
        return "dask-cluster"
    if data.get("benchmark") in ("network", "host", "depthwise_nets", "auto_sweep", "ndimage",
                                 "dask", "cold", "train_step") and \
            isinstance(data.get("rows"), list):
        return data["benchmark"]
    if isinstance(data.get("layers"), list) and "summary" in data:
        return "precision"
    if {"forward", "backward", "gemm"} & set(data):
        return "bench"
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        return None
    if "fitted" in data:
        return "calibration"
    if "pass" in rows[0] and "copy_bandwidth_Bps" in data:
        return "depthwise"
    if "in1" in rows[0] and isinstance(rows[0].get("ms"), dict):
        return "signal"
    return None


def load(path) -> dict:
    data = json.loads(Path(path).read_text())
    if kind_of(data) is None:
        raise ValueError(f"{path} is not a results file of benchmarks/bench*.py or "
                         "calibrate_signal.py")
    return data


def ceilings_of(data: dict, dtype: str = "float32"):
    """(FLOP/s, bytes/s, source) for the run's GPU, or None."""
    c = data.get("ceilings")
    if isinstance(c, dict) and c.get("flops", {}).get(dtype) and c.get("bandwidth"):
        return c["flops"][dtype], c["bandwidth"], "measured in the run"
    t = table_ceilings(data.get("gpu", ""), dtype)
    return (t.flops, t.bandwidth, "cupyconv._cli.ceilings.TABLE") if t else None


def forward_metrics(row: dict, ceil) -> dict:
    """ms, TFLOP/s, GB/s, fractions of the ceilings and peer ratios of one forward row (auto)."""
    n, c, h, w, k, r, s, p, d, g = row["shape"]
    geom = ConvGeometry.from_shapes((n, c, h, w), (k, c // g, r, r), stride=s, padding=p,
                                    dilation=d, groups=g, dtype="float32")
    ms = row["ms"].get("auto")
    if ms is None:  # older runs without "auto": the best method that ran
        ms = min(v for m, v in row["ms"].items() if m not in PEERS)
    sec = ms * 1e-3
    out = {"problem": row["problem"], "ms": ms, "wall_ms": (row.get("wall_ms") or {}).get("auto"),
           "tflops": geom.flops / sec / 1e12,
           "gbps": geom.bytes_moved(4) / sec / 1e9, "picked": row.get("auto_choice", ""),
           "host_us": row.get("host_us_auto"),
           "ratios": {p: row["ms"][p] / ms for p in PEERS if p in row["ms"]}}
    if ceil:
        out["flop_frac"] = geom.flops / sec / ceil[0]
        out["bw_frac"] = geom.bytes_moved(4) / sec / ceil[1]
    return out


def _geomean(values) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def _fmt(v, spec=".2f") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _depthwise_markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """bench_depthwise.py: each pass against cuDNN, in GB/s of the measured copy bandwidth."""
    bw = data["copy_bandwidth_Bps"]
    lines = [f"### {name}: {data.get('gpu')}, commit {data.get('commit')}, {data.get('date')}", "",
             f"Depthwise and separable layers against cuDNN (PyTorch {data.get('torch')}, cuDNN "
             f"{data.get('cudnn')}); copy bandwidth {bw / 1e12:.2f} TB/s measured in the run; "
             "ratios > 1: cupyconv faster.", "",
             "| problem | pass | dtype | ours ms | GB/s | % copy | peers (x ours) |", "|---|---|---|---|---|---|---|"]
    rows = []
    for r in data["rows"]:
        ratios = {k: v for k, v in r.get("speedup", {}).items()}
        rows.append({"problem": f"{r['problem']} {r['pass']} {r['dtype']}", "ratios": ratios})
        peers = ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
        lines.append(f"| {r['problem']} | {r['pass']} | {r['dtype']} | {r['ms']['ours']:.4f} | "
                     f"{r['GBps']:.0f} | {100 * r['frac_copy']:.1f} | {peers} |")
    return "\n".join(lines + [""]), [], rows


def _signal_markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """bench_signal.py: our direct / FFT / auto against CuPy's routines."""
    lines = [f"### {name}: {data.get('device')}, commit {data.get('commit')}", "",
             f"{data.get('note', '')}".strip(), "",
             "| problem | direct ms | fft ms | auto ms | auto picked | auto / fastest | peers (x direct) |",
             "|---|---|---|---|---|---|---|"]
    rows = []
    for r in data["rows"]:
        ms = r["ms"]
        peers = {k: v / ms["direct"] for k, v in ms.items()
                 if k not in ("direct", "fft", "auto") and ms.get("direct")}
        rows.append({"problem": r["problem"], "ratios": peers})
        lines.append(f"| {r['problem']} | {_fmt(ms.get('direct'), '.3f')} | {_fmt(ms.get('fft'), '.3f')} | "
                     f"{_fmt(ms.get('auto'), '.3f')} | {r.get('auto_picked', '—')} | "
                     f"{_fmt(r.get('auto_vs_fastest'))} | "
                     + ", ".join(f"{k} {v:.2f}" for k, v in peers.items()) + " |")
    return "\n".join(lines + [""]), [], rows


def _calibration_markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """calibrate_signal.py: the measured grid and the fitted cost constants (no plot)."""
    lines = [f"### {name}: signal cost-model calibration", "",
             "| dtype | in1 | in2 | direct ms | fft ms |", "|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['dtype']} | {r['in1']} | {r['in2']} | {r['direct_ms']:.3f} | "
                     f"{r['fft_ms']:.3f} |")
    lines += ["", "Fitted: " + ", ".join(f"{k} = {v}" for k, v in data["fitted"].items()), ""]
    return "\n".join(lines), [], []


NETWORK_PEERS = {"float32": ("cudnn_fp32", "cudnn_tf32"),
                 "float16": ("cudnn_fp16", "cudnn_fp16_cl")}
NETWORK_LABELS = {"cudnn_fp32": "cuDNN fp32", "cudnn_tf32": "cuDNN TF32",
                  "cudnn_fp16": "cuDNN fp16", "cudnn_fp16_cl": "cuDNN fp16 CL"}


def _network_markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """bench_network.py: one pass over a network's convs, wall and graph ms, against cuDNN."""
    settings = data.get("settings") or {}
    l2 = data.get("l2_bytes")
    lines = [f"### {name}: {data.get('gpu')}, commit {data.get('commit')}, {data.get('date')}", "",
             "Every convolution of the network (224x224 input) as one pass of eager cupyconv "
             "calls: "
             "*wall* = perf_counter around a loop of passes ending in a device synchronize, per "
             "pass (host included); *graph* = replay of a CUDA graph of the pass (device only). "
             f"Peers: cuDNN through PyTorch {data.get('torch')} (cuDNN {data.get('cudnn')}), "
             f"autotuned (cudnn.benchmark {settings.get('cudnn_benchmark')}); fp16 CL = "
             "channels_last.  Operands rotated over "
             f">= {settings.get('l2_factor', 3)}x the L2"
             + (f" of {l2 / 2 ** 20:.0f} MiB" if l2 else "") + " (copies: of every layer's "
             "operands, one per pass in turn); x = peer ms / cupyconv ms (> 1: cupyconv faster).",
             ""]
    for dtype, peers in NETWORK_PEERS.items():
        rows = [r for r in data["rows"] if r.get("dtype") == dtype]
        if not rows:
            continue
        head = [f"network ({dtype})", "batch", "layout", "copies", "wall ms", "graph ms"]
        for p in peers:
            head += [f"{NETWORK_LABELS[p]} wall ms", "x wall", f"{NETWORK_LABELS[p]} graph ms",
                     "x graph"]
        head += ["max err"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        geo = {(p, kind): [] for p in peers for kind in ("wall", "graph")}
        for r in rows:
            for layout, ours in r["cupyconv"].items():
                cells = [r["network"], str(r["batch"]), layout, str(r.get("copies", "—")),
                         _fmt(ours.get("wall_ms"), ".3f"), _fmt(ours.get("graph_ms"), ".3f")]
                ratios = ((r.get("ratios") or {}).get(layout)) or {}
                for p in peers:
                    peer = (r.get("peers") or {}).get(p) or {}
                    for kind in ("wall", "graph"):
                        x = (ratios.get(kind) or {}).get(p)
                        geo[(p, kind)].append(x)
                        cells += [_fmt(peer.get(f"{kind}_ms"), ".3f"), _fmt(x)]
                cells.append(_fmt(ours.get("max_err"), ".1e"))
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        means = [f"{NETWORK_LABELS[p]} {_geomean(geo[(p, kind)]):.2f}x ({kind})"
                 for p in peers for kind in ("wall", "graph")
                 if not math.isnan(_geomean(geo[(p, kind)]))]
        if means:
            lines += [f"Geomean over the {dtype} rows: " + ", ".join(means) + ".", ""]
    return "\n".join(lines), [], []


def _host_markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """bench_host.py: host µs per warm call against the target, graph replay µs per call."""
    target = data.get("target_us", 15)
    lines = [f"### {name}: {data.get('gpu')}, commit {data.get('commit')}, {data.get('date')}", "",
             "Host time per warm call: µs of Python per call, median of "
             f"{data.get('loops')} loops of {data.get('calls')} calls without synchronizing (tiny problems: the device is "
             f"never the bottleneck); target {target:g} µs.  graph µs: device time per call of "
             f"{data.get('graph_calls')} calls captured in one CUDA graph and replayed.", "",
             f"| op | call | host µs | <= {target:g} µs | graph µs |", "|---|---|---|---|---|"]
    for r in data["rows"]:
        ok = {True: "yes", False: "no"}.get(r.get("meets_target"), "—")
        graph = _fmt(r.get("graph_us"), ".2f") if r.get("graph_us") is not None else (
            "— (not capturable)" if r.get("graph_error") else "—")
        op = r["op"] + (" (reference)" if r.get("peer") else "")
        lines.append(f"| {op} | `{r.get('call', '')}` | {_fmt(r.get('host_us'), '.1f')} | "
                     f"{ok if not r.get('peer') else '—'} | {graph} |")
    ours = [r for r in data["rows"] if not r.get("peer")]
    meeting = sum(bool(r.get("meets_target")) for r in ours)
    lines += ["", f"{meeting} of {len(ours)} cupyconv rows meet {target:g} µs.", ""]
    return "\n".join(lines), [], []


FP16_KEYS = {"auto": "cupyconv NCHW", "auto_nhwc": "cupyconv NHWC", "cudnn_fp16": "cuDNN fp16",
             "cudnn_fp16_cl": "cuDNN fp16 CL"}


def _fp16_table(rows: list[dict]) -> list[str]:
    """bench.py's float16 columns: device ms of each, and peer / ours per layout pairing."""
    rows = [r for r in rows if r.get("fp16")]
    if not rows:
        return []
    head = ["problem (float16)"] + [f"{v} ms" for v in FP16_KEYS.values()] + [
        "x cuDNN fp16 (NCHW)", "x cuDNN fp16 CL (NHWC)", "x best (best)", "err"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ms = r["fp16"].get("ms", {})
        best_ours = min((ms[k] for k in ("auto", "auto_nhwc") if ms.get(k)), default=None)
        best_peer = min((ms[k] for k in ("cudnn_fp16", "cudnn_fp16_cl") if ms.get(k)), default=None)
        cells = [r["problem"]] + [_fmt(ms.get(k), ".3f") for k in FP16_KEYS]
        cells += [_fmt(_ratio(ms.get("cudnn_fp16"), ms.get("auto"))),
                  _fmt(_ratio(ms.get("cudnn_fp16_cl"), ms.get("auto_nhwc"))),
                  _fmt(_ratio(best_peer, best_ours)),
                  _fmt(r["fp16"].get("err", {}).get("auto"), ".1e")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _ratio(peer, ours):
    return peer / ours if peer and ours else None


def _script_markdown(script: str):
    """A renderer of the results of ``script`` (bench_precision.py, bench_depthwise_nets.py,
    experiments/sweep_auto.py, bench_ndimage.py, bench_dask.py, bench_dask_cluster.py,
    bench_cold.py, bench_train_step.py; a path
    under benchmarks/ without ".py"): the tables of that script's own ``markdown``, no plot
    metrics."""

    def render(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            Path(script).name, Path(__file__).resolve().parent / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return f"### {name}\n\n" + module.markdown(data), [], []

    return render


def markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """The Markdown of one results file, with the forward metrics and the other per-problem peer
    ratios (backward passes, depthwise, signal) for the plots."""
    kind = kind_of(data)
    if kind != "bench":
        return {"depthwise": _depthwise_markdown, "signal": _signal_markdown,
                "calibration": _calibration_markdown, "network": _network_markdown,
                "host": _host_markdown, "precision": _script_markdown("bench_precision"),
                "depthwise_nets": _script_markdown("bench_depthwise_nets"),
                "auto_sweep": _script_markdown("experiments/sweep_auto"),
                "ndimage": _script_markdown("bench_ndimage"),
                "dask": _script_markdown("bench_dask"),
                "dask-cluster": _script_markdown("bench_dask_cluster"),
                "cold": _script_markdown("bench_cold"),
                "train_step": _script_markdown("bench_train_step")}[kind](data, name)
    ceil = ceilings_of(data)
    lines = [f"### {name}: {data.get('gpu')}, commit {data.get('commit')}, {data.get('date')}", ""]
    lines.append(f"CuPy {data.get('cupy')}, PyTorch {data.get('torch')}, cuDNN {data.get('cudnn')}; "
                 f"median of {data.get('repeat')} samples; ratios > 1: cupyconv faster.")
    settings = data.get("settings") or {}
    if settings:
        lines.append(f"cuDNN autotuned (cudnn.benchmark {settings.get('cudnn_benchmark')}); "
                     f"operands rotated over >= {settings.get('l2_factor')}x the L2 (up to "
                     f"{settings.get('max_copies')} copies per problem); wall ms: a loop of calls "
                     "ending in a device synchronize, per call.")
    if ceil:
        lines.append(f"Ceilings ({ceil[2]}): {ceil[0] / 1e12:.1f} TFLOP/s fp32 (cuBLAS, TF32 "
                     f"off), {ceil[1] / 1e12:.2f} TB/s copy.")
    lines.append("")
    fwd = [forward_metrics(r, ceil) for r in data.get("forward") or []]
    if fwd:
        present = [p for p in PEERS if any(p in m["ratios"] for m in fwd)]
        wall = any(m["wall_ms"] for m in fwd)
        head = ["problem (float32, batch 32 unless noted)", "ms"] + (["wall ms"] if wall else [])
        head += ["TFLOP/s", "GB/s"]
        head += ["% FLOP ceiling", "% copy ceiling"] if ceil else []
        head += [f"x {PEERS[p]}" for p in present] + ["auto picked"]
        host = any(m["host_us"] for m in fwd)
        head += ["host µs"] if host else []
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m in fwd:
            cells = [m["problem"], _fmt(m["ms"], ".3f")] + (
                [_fmt(m["wall_ms"], ".3f")] if wall else [])
            cells += [_fmt(m["tflops"], ".1f"), _fmt(m["gbps"], ".0f")]
            if ceil:
                cells += [_fmt(100 * m["flop_frac"], ".0f"), _fmt(100 * m["bw_frac"], ".0f")]
            cells += [_fmt(m["ratios"].get(p)) for p in present] + [m["picked"] or "—"]
            cells += [_fmt(m["host_us"], ".0f")] if host else []
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("Geomean over all problems: " + ", ".join(
            f"{_geomean([m['ratios'].get(p) for m in fwd]):.2f}x {PEERS[p]}" for p in present)
            + ".")
        walls = [r.get("wall_ms") or {} for r in data["forward"]]
        walls = {p: _geomean([_ratio(w.get(p), w.get("auto")) for w in walls]) for p in PEERS}
        walls = {p: v for p, v in walls.items() if not math.isnan(v)}
        if walls:
            lines.append("By wall time (a loop of calls ending in a synchronize): " + ", ".join(
                f"{v:.2f}x {PEERS[p]}" for p, v in walls.items()) + ".")
        lines.append("")
        lines += _fp16_table(data["forward"])
    bwd = []
    if data.get("backward") and data["backward"].get("rows"):
        lines += ["| backward problem (float32) | data ms | cuDNN | x cuDNN | weight ms | cuDNN | "
                  "x cuDNN |", "|---|---|---|---|---|---|---|"]
        for r in data["backward"]["rows"]:
            m = {"problem": f"bwd {r['problem']}", "ratios": {}}
            cells = [r["problem"]]
            for kind in ("data", "weight"):
                ours, peer = r.get(f"{kind}_ms"), r.get(f"cudnn_{kind}_ms")
                ratio = peer / ours if ours and peer else None
                m["ratios"][f"backward-{kind}"] = ratio
                cells += [_fmt(ours, ".3f"), _fmt(peer, ".3f"), _fmt(ratio)]
            bwd.append(m)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if data.get("gemm"):
        lines += ["| GEMM fp32 | ms | TFLOP/s | cuBLAS ms | x cuBLAS |", "|---|---|---|---|---|"]
        for r in data["gemm"]:
            lines.append(f"| {r['size']}³ | {r['ours_ms']:.3f} | {r['ours_tflops']:.1f} | "
                         f"{r['cublas_ms']:.3f} | {r['ratio']:.2f} |")
        lines.append("")
    return "\n".join(lines), fwd, bwd


def plot(fwd: list[dict], bwd: list[dict], stem: Path, title: str) -> list[Path]:
    """The two PNGs of one results file (peers, ceilings); [] without matplotlib or data."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.py: matplotlib is not installed: Markdown only (pip install matplotlib, "
              "or the 'bench' extra)", file=sys.stderr)
        return []
    written = []
    rows = fwd + bwd
    series = [p for p in PEERS if any(p in m["ratios"] for m in fwd)]
    series += [k for k in ("backward-data", "backward-weight") if bwd]
    if rows and series:
        fig, ax = plt.subplots(figsize=(10, 3.6), dpi=80)
        width = 0.8 / len(series)
        for i, key in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
            ys = [m["ratios"].get(key) or 0.0 for m in rows]
            label = PEERS.get(key, f"{key} vs cuDNN fp32")
            ax.bar(xs, ys, width, label=f"x {label}" if key in PEERS else label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([m["problem"] for m in rows], rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("peer time / cupyconv time")
        ax.set_title(f"{title}: ratio to each peer (> 1: cupyconv faster)", fontsize=9)
        ax.legend(fontsize=7, ncol=len(series))
        fig.tight_layout()
        path = Path(f"{stem}-peers.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    if fwd and "flop_frac" in fwd[0]:
        fig, ax = plt.subplots(figsize=(10, 3.2), dpi=80)
        xs = range(len(fwd))
        ax.bar([x - 0.2 for x in xs], [100 * m["flop_frac"] for m in fwd], 0.4,
               label="% of the FLOP ceiling (cuBLAS SGEMM)")
        ax.bar([x + 0.2 for x in xs], [100 * m["bw_frac"] for m in fwd], 0.4,
               label="% of the copy bandwidth (x + w + y once)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([m["problem"] for m in fwd], rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("% of ceiling")
        ax.set_title(f"{title}: forward auto, achieved fraction of the device ceilings",
                     fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(f"{stem}-ceilings.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results JSON files from bench.py")
    parser.add_argument("--out", help="write the Markdown here (default: stdout)")
    parser.add_argument("--plots", help="directory for the PNGs (default: next to each JSON)")
    parser.add_argument("--no-plots", action="store_true", help="Markdown only")
    args = parser.parse_args(argv)
    parts = []
    for name in args.results:
        path = Path(name)
        try:
            data = load(path)
        except (OSError, ValueError) as e:
            parser.error(f"cannot read {name}: {e}")
        text, fwd, bwd = markdown(data, path.name)
        if not args.no_plots:
            out_dir = Path(args.plots) if args.plots else path.parent
            out_dir.mkdir(parents=True, exist_ok=True)
            for png in plot(fwd, bwd, out_dir / path.stem, f"{data.get('gpu')} {data.get('commit')}"):
                text += f"\n![{png.stem}]({png.name})\n"
                print(f"wrote {png}", file=sys.stderr)
        parts.append(text)
    report = "\n".join(parts)
    if args.out:
        Path(args.out).write_text(report + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
