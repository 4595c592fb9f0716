"""Benchmark report: a results JSON of ``bench.py`` as Markdown tables and PNG plots.

    python3 benchmarks/report.py benchmarks/results/forward-NVIDIA_H200-737b9de.json \
        [more.json ...] [--out report.md] [--plots DIR] [--no-plots]

Markdown (stdout or ``--out``): forward problems with ms, TFLOP/s, GB/s, the fractions of the
device ceilings and the ratio to each peer (cuDNN fp32 / TF32, im2col + cupy.matmul; > 1:
cupyconv faster); backward-data and backward-weight against cuDNN; the GEMM against cuBLAS.
Results of bench_depthwise.py (GB/s of the copy rate, ratios to cuDNN), bench_signal.py (ratios
to CuPy's routines) and calibrate_signal.py render too.
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
    "signal" (bench_signal.py), "calibration" (calibrate_signal.py), or None."""
    if not isinstance(data, dict):
        return None
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
    out = {"problem": row["problem"], "ms": ms, "tflops": geom.flops / sec / 1e12,
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


def markdown(data: dict, name: str) -> tuple[str, list[dict], list[dict]]:
    """The Markdown of one results file, with the forward metrics and the other per-problem peer
    ratios (backward passes, depthwise, signal) for the plots."""
    kind = kind_of(data)
    if kind != "bench":
        return {"depthwise": _depthwise_markdown, "signal": _signal_markdown,
                "calibration": _calibration_markdown}[kind](data, name)
    ceil = ceilings_of(data)
    lines = [f"### {name}: {data.get('gpu')}, commit {data.get('commit')}, {data.get('date')}", ""]
    lines.append(f"CuPy {data.get('cupy')}, PyTorch {data.get('torch')}, cuDNN {data.get('cudnn')}; "
                 f"median of {data.get('repeat')} samples; ratios > 1: cupyconv faster.")
    if ceil:
        lines.append(f"Ceilings ({ceil[2]}): {ceil[0] / 1e12:.1f} TFLOP/s fp32 (cuBLAS, TF32 "
                     f"off), {ceil[1] / 1e12:.2f} TB/s copy.")
    lines.append("")
    fwd = [forward_metrics(r, ceil) for r in data.get("forward") or []]
    if fwd:
        present = [p for p in PEERS if any(p in m["ratios"] for m in fwd)]
        head = ["problem (float32, batch 32 unless noted)", "ms", "TFLOP/s", "GB/s"]
        head += ["% FLOP ceiling", "% copy ceiling"] if ceil else []
        head += [f"x {PEERS[p]}" for p in present] + ["auto picked"]
        host = any(m["host_us"] for m in fwd)
        head += ["host µs"] if host else []
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m in fwd:
            cells = [m["problem"], _fmt(m["ms"], ".3f"), _fmt(m["tflops"], ".1f"),
                     _fmt(m["gbps"], ".0f")]
            if ceil:
                cells += [_fmt(100 * m["flop_frac"], ".0f"), _fmt(100 * m["bw_frac"], ".0f")]
            cells += [_fmt(m["ratios"].get(p)) for p in present] + [m["picked"] or "—"]
            cells += [_fmt(m["host_us"], ".0f")] if host else []
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("Geomean over all problems: " + ", ".join(
            f"{_geomean([m['ratios'].get(p) for m in fwd]):.2f}x {PEERS[p]}" for p in present)
            + ".")
        lines.append("")
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
