"""Depthwise and grouped convolutions of real networks against PyTorch (issue 17, item 4).

    python3 benchmarks/bench_depthwise_nets.py [--out DIR] [--repeat 5] [--quick]
        [--nets mobilenetv2,efficientnet_b0,resnext50_32x4d] [--dtypes float32,float16,bfloat16]
        [--layouts NCHW,NHWC] [--passes forward,backward-data,backward-weight]

Layers (benchmarks/networks.py, 224x224 input, batch 32): every depthwise conv of MobileNetV2
(17: 3x3, stride 1 and 2) and of EfficientNet-B0 (16: 3x3 and 5x5, stride 1 and 2), measured
once per distinct shape (19 shapes; each row says how many layers of each network have it),
and the 3x3 convs in 32 groups of ResNeXt-50 32x4d (16 layers, 7 shapes, the stride-2 first
blocks of stages 2-4 included).

Depthwise rows run in fp32 NCHW, fp32 NHWC, fp16 NHWC (the issue's target lines), bf16 NHWC
and fp16 NCHW; grouped rows in fp32 NCHW and fp16 NHWC.  Each row times forward,
backward-data and backward-weight of cupyconv's public calls (``conv``,
``conv_backward_data``, ``conv_backward_weight``; method "auto"; ``layout=`` as the row) and
of PyTorch's fastest path for the same dtype and layout (``F.conv2d`` and, as autograd calls
it, ``aten.convolution_backward``, with groups; ``channels_last`` tensors for NHWC; cuDNN
autotuned with ``cudnn.benchmark = True``; TF32 off) on the same memory.  Each of
our results is checked against PyTorch's: a relative error above
``cupyconv._core.verify.AGREEMENT`` (the allowed difference of two GPU results) is flagged.

Device time: operands rotate over copies spanning at least 3x the L2 (up to ``ROTATION_CAP``
copies), and the calls over them are captured into a CUDA graph and replayed
(``measure.rotated_graph_ms``): most of these layers take less device time than one call's
Python, so back-to-back eager calls would time the host.  Where a capture fails, both sides of
the pass are timed as eager calls between events instead (``timing`` says which).

Bytes: what a perfect kernel moves (``ConvGeometry.bytes_moved``: x, w and y once each; the
same for the three passes, each of which reads two of x, w, dy and writes the third); GB/s and
the fraction of the device-to-device copy rate measured in the run; layers moving more than the
L2 holds are flagged (on the others a rate above the copy rate is possible).  Ratio = PyTorch
time / ours (> 1: cupyconv faster).

Summary per (family, dtype, layout, pass): geometric mean and minimum of the ratio over the
layers (each distinct shape once), the ratio of total times with each shape weighted by how
many layers have it, the fraction of the copy rate on the layers larger than L2, mismatches,
and on the target lines met/missed against ``TARGETS`` (``--target-*``).

Writes ``depthwise-nets-<gpu>-<commit>[-quick].json`` and ``.md`` into ``--out`` (progress
on stderr, the tables on stdout); ``benchmarks/report.py`` renders the JSON.  About 3 minutes
on an H100 once the kernels are in the disk cache (a first run compiles them: add a few).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import zlib
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import git_commit  # noqa: E402
from cupyconv._core.dtypes import itemsize  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.verify import AGREEMENT  # noqa: E402
from networks import NETWORKS, Layer, distinct_layers  # noqa: E402

BATCH = 32
PASSES = ("forward", "backward-data", "backward-weight")
# family -> (its networks, which of their layers it takes)
FAMILIES = {
    "depthwise": (("mobilenetv2", "efficientnet_b0"), lambda layer: layer.depthwise),
    "grouped": (("resnext50_32x4d",), lambda layer: layer.groups > 1 and not layer.depthwise),
}
NETS = tuple(net for nets, _ in FAMILIES.values() for net in nets)
# (dtype, layout) rows of each family; the targets are on the first three depthwise ones
COMBOS = {
    "depthwise": (("float32", "NCHW"), ("float32", "NHWC"), ("float16", "NHWC"),
                  ("bfloat16", "NHWC"), ("float16", "NCHW")),
    "grouped": (("float32", "NCHW"), ("float16", "NHWC")),
}
TARGET_COMBOS = COMBOS["depthwise"][:3]
DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("NCHW", "NHWC")
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# Issue 17's bars: 2x PyTorch as the geometric mean (benchmarks/notes/depthwise.md,
# "Issue 17, item 1"), never slower as the minimum, 60 % of the copy rate on layers past L2 (issue
# 5's depthwise bar)
TARGETS = {"geomean": 2.0, "min": 1.0, "copy_fraction": 0.6}
# The smallest layers move ~6 MB (960 channels at 7x7 in fp16): measure.MAX_COPIES (8) copies of
# them would span about one L2, not three
ROTATION_CAP = 32
# --quick: a 3x3 and a 5x5 stride-2 depthwise layer past the L2 in fp32, a small one, a grouped one
QUICK_LAYERS = ("dw 3x3 s1 144ch 56^2", "dw 5x5 s2 144ch 56^2", "dw 3x3 s1 960ch 7^2",
                "g32 3x3 s1 256ch 28^2")
QUICK_COMBOS = (("float32", "NCHW"), ("float16", "NHWC"))
_T0 = time.perf_counter()


class BenchLayer(NamedTuple):
    """One distinct layer shape of the benchmark."""

    family: str                          # a key of FAMILIES
    layer: Layer                         # the first of the networks' layers of this shape
    counts: tuple[tuple[str, int], ...]  # (network, how many of its layers have this shape)

    @property
    def label(self) -> str:
        return layer_label(self.layer)

    @property
    def uses(self) -> int:
        return sum(n for _, n in self.counts)


def layer_label(layer: Layer) -> str:
    kind = "dw" if layer.depthwise else f"g{layer.groups}"
    return f"{kind} {layer.kernel}x{layer.kernel} s{layer.stride} {layer.in_channels}ch {layer.H}^2"


def bench_layers(nets=NETS, quick: bool = False) -> list[BenchLayer]:
    """The distinct depthwise and grouped layers of ``nets``, family by family, in network
    order; with ``quick`` only those of QUICK_LAYERS."""
    out = []
    for family, (family_nets, keep) in FAMILIES.items():
        chosen = {net: NETWORKS[net]() for net in family_nets if net in nets}
        for layer, counts in distinct_layers(chosen, keep):
            entry = BenchLayer(family, layer, tuple(counts.items()))
            if not quick or entry.label in QUICK_LAYERS:
                out.append(entry)
    return out


def row_combos(family: str, dtypes=DTYPES, layouts=LAYOUTS, quick: bool = False) -> list[tuple]:
    """The (dtype, layout) rows of ``family`` that the options keep."""
    return [(d, lay) for d, lay in COMBOS[family] if d in dtypes and lay in layouts
            and (not quick or (d, lay) in QUICK_COMBOS)]


def geometry(layer: Layer, dtype: str, layout: str, batch: int = BATCH) -> ConvGeometry:
    return ConvGeometry.from_shapes(layer.input_shape(batch, layout), layer.weight_shape(layout),
                                    stride=layer.stride, padding=layer.padding,
                                    groups=layer.groups, layout=layout, dtype=dtype)


def pass_metrics(ours_ms: float, peer_ms: float, nbytes: int, copy_rate: float) -> dict:
    """Times, peer / ours, our rate in GB/s and as a fraction of the copy rate (bytes/s), and
    the ceiling of peer / ours: the peer's time over that of a kernel moving the pass's bytes
    at the copy rate (a memory-bound pass, its operands rotated past the L2, gets no faster)."""
    rate = nbytes / (ours_ms * 1e-3)
    return {"ours_ms": ours_ms, "peer_ms": peer_ms, "ratio": measure.ratio(peer_ms, ours_ms),
            "GBps": rate / 1e9, "frac_copy": rate / copy_rate,
            "ceiling": measure.ratio(peer_ms, nbytes / copy_rate * 1e3)}


def parse_args(argv=None) -> argparse.Namespace:
    """The options, with the comma lists split and checked (a bad one is a usage error)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--nets", default=",".join(NETS), help="networks whose layers run")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--passes", default=",".join(PASSES))
    parser.add_argument("--repeat", type=int, help="timed samples per measurement (default 5, "
                        "3 with --quick)")
    parser.add_argument("--target-ms", type=float, default=10.0, help="length of one sample")
    parser.add_argument("--quick", action="store_true", help=f"smoke test: layers "
                        f"{', '.join(QUICK_LAYERS)} in fp32 NCHW and fp16 NHWC")
    for key, value in TARGETS.items():
        parser.add_argument(f"--target-{key.replace('_', '-')}", type=float, default=value,
                            dest=f"target_{key}", help=f"bar of the target lines ({value})")
    args = parser.parse_args(argv)
    split_choices(parser, args, {"nets": NETS, "dtypes": DTYPES, "layouts": LAYOUTS,
                                 "passes": PASSES})
    args.targets = {key: getattr(args, f"target_{key}") for key in TARGETS}
    return args


def split_choices(parser, args, allowed: dict) -> None:
    """Each comma list ``args.<name>`` of ``allowed`` (name -> choices) as a list in the order of
    the choices (the tables' order), and ``args.repeat`` defaulted (3 with --quick, else 5); an
    unknown or empty list, or a repeat below 1, is a usage error."""
    for name, choices in allowed.items():
        values = [v for v in getattr(args, name).split(",") if v]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            parser.error(f"--{name}: {unknown or 'nothing'} not among {', '.join(choices)}")
        setattr(args, name, [v for v in choices if v in values])
    if args.repeat is None:
        args.repeat = 3 if args.quick else 5
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")


# ------------------------------------------------------------------------------------ GPU part
def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f} s] {message}", file=sys.stderr, flush=True)


def our_calls(layer: Layer, geom: ConvGeometry) -> dict:
    """pass -> call of cupyconv on one copy's (x, w, dy) arrays."""
    opts = dict(stride=layer.stride, padding=layer.padding, groups=layer.groups,
                layout=geom.layout)
    x_shape, w_shape = geom.input_shape, geom.weight_shape
    return {"forward": lambda ops: cupyconv.conv(ops[0], ops[1], **opts),
            "backward-data": lambda ops: cupyconv.conv_backward_data(ops[2], ops[1], x_shape,
                                                                     **opts),
            "backward-weight": lambda ops: cupyconv.conv_backward_weight(ops[0], ops[2], w_shape,
                                                                         **opts)}


def peer_calls(torch, layer: Layer) -> dict:
    """pass -> call of PyTorch on one copy's (x, w, dy) tensors (NCHW shapes).  The backward
    passes call ``aten.convolution_backward`` with the real x and w, as autograd does in
    training: ``torch.nn.grad.conv2d_input`` / ``conv2d_weight`` pass a stride-0 stand-in for
    the tensor they do not need, whose memory format then steers PyTorch's choice of kernel
    and which a backend may first make contiguous (a copy autograd never pays)."""
    conv_backward = torch.ops.aten.convolution_backward
    s, p, d = [layer.stride] * 2, [layer.padding] * 2, [1, 1]

    def backward(ops, mask):  # (dy, x, w, bias sizes, ..., transposed, output padding, groups)
        return conv_backward(ops[2], ops[0], ops[1], None, s, p, d, False, [0, 0], layer.groups,
                             mask)

    return {"forward": lambda ops: torch.nn.functional.conv2d(ops[0], ops[1], None, s, p, d,
                                                              layer.groups),
            "backward-data": lambda ops: backward(ops, [True, False, False])[0],
            "backward-weight": lambda ops: backward(ops, [False, True, False])[1]}


def measure_row(entry: BenchLayer, dtype: str, layout: str, passes, torch, l2_bytes: int,
                copy_rate: float, args) -> dict:
    """Every pass of ``passes`` of one layer in one dtype and layout, ours and PyTorch's."""
    from cupyconv._dispatch.choose import describe

    layer, nhwc = entry.layer, layout == "NHWC"
    geom = geometry(layer, dtype, layout)
    nbytes = geom.bytes_moved(itemsize(dtype))
    copies = measure.rotation_copies(l2_bytes, nbytes, cap=ROTATION_CAP)
    shapes = (layer.input_shape(BATCH), layer.weight_shape(), layer.output_shape(BATCH))
    tensors = measure.torch_operand_copies(torch, shapes, dtype, nhwc, copies,
                                           seed=zlib.crc32(f"{entry.label} {dtype}".encode()))
    arrays = [tuple(measure.cupy_view(t, nhwc) for t in ops) for ops in tensors]
    ours, peer = our_calls(layer, geom), peer_calls(torch, layer)
    row = {"family": entry.family, "layer": entry.label, "first": layer.name,
           "counts": dict(entry.counts), "uses": entry.uses, "dtype": dtype, "layout": layout,
           "shape": {"C": layer.in_channels, "K": layer.out_channels, "H": layer.H, "W": layer.W,
                     "kernel": layer.kernel, "stride": layer.stride, "padding": layer.padding,
                     "groups": layer.groups, "out_H": layer.out_H, "out_W": layer.out_W},
           "bytes": nbytes, "larger_than_l2": nbytes > l2_bytes, "copies": copies,
           "auto_forward": describe(geom)["algorithm"], "passes": {}}
    for name in passes:
        ref = peer[name](tensors[0])  # (the first calls also compile, prepare and autotune)
        err = measure.rel_err_gpu(ours[name](arrays[0]),
                                  ref.permute(0, 2, 3, 1).contiguous() if nhwc else ref)
        del ref
        times, how, why = measure.ours_and_torch_times(
            torch, ours[name], arrays, peer[name], tensors, repeat=args.repeat,
            target_ms=args.target_ms, log=progress)
        row["passes"][name] = {**pass_metrics(times["ours"], times["peer"], nbytes, copy_rate),
                               "err": err, "ok": err <= AGREEMENT[dtype], "timing": how}
        if why:
            row["passes"][name]["graph_error"] = why
    return row


def row_line(row: dict) -> str:
    """One progress line: the layer, then ratio, our ms and % of copy per pass."""
    cells = []
    for name, p in row["passes"].items():
        flag = "" if p["ok"] else f" MISMATCH err {p['err']:.1e}"
        cells.append(f"{name} {_x(p['ratio'])} ({p['ours_ms']:.4f} ms, "
                     f"{100 * p['frac_copy']:.0f} % copy){flag}")
    return f"{row['layer']:22s} {SHORT[row['dtype']]} {row['layout']}  " + "  ".join(cells)


# --------------------------------------------------------------------------- summary, report
def summary(rows, targets=TARGETS) -> list[dict]:
    """One line per (family, dtype, layout, pass) present in ``rows``: peer / ours over the
    layers (geometric mean, minimum and its layer, the ratio of use-weighted total times), the
    geometric mean of its copy-rate ceilings (:func:`pass_metrics`; None for results that
    predate them), our fraction of the copy rate on the layers larger than L2 (geometric mean,
    minimum), the mismatches; on the target lines ``target``: {bar: met?} (None where no layer
    gives it)."""
    out = []
    for family, combos in COMBOS.items():
        for dtype, layout in combos:
            for name in PASSES:
                cells = [(r, r["passes"][name]) for r in rows if r["family"] == family
                         and r["dtype"] == dtype and r["layout"] == layout
                         and name in r["passes"]]
                if not cells:
                    continue
                timed = [(r, p) for r, p in cells if p["ratio"] is not None]
                worst = min(timed, key=lambda rp: rp[1]["ratio"], default=(None, None))
                big = [p["frac_copy"] for r, p in cells if r["larger_than_l2"]]
                line = {"family": family, "dtype": dtype, "layout": layout, "pass": name,
                        "layers": len(cells),
                        "geomean": measure.geomean([p["ratio"] for _, p in timed]),
                        "min": worst[1]["ratio"] if worst[1] else None,
                        "min_layer": worst[0]["layer"] if worst[0] else None,
                        "weighted": measure.ratio(sum(r["uses"] * p["peer_ms"] for r, p in cells),
                                                  sum(r["uses"] * p["ours_ms"] for r, p in cells)),
                        "ceiling_geomean": _ceiling_geomean(cells),
                        "over_l2_layers": len(big), "copy_geomean": measure.geomean(big),
                        "copy_min": min(big, default=None),
                        "mismatches": sum(not p["ok"] for _, p in cells), "target": None}
                if family == "depthwise" and (dtype, layout) in TARGET_COMBOS:
                    values = {"geomean": line["geomean"], "min": line["min"],
                              "copy_fraction": line["copy_geomean"]}
                    line["target"] = {k: None if values[k] is None else values[k] >= bar
                                      for k, bar in targets.items()}
                out.append(line)
    return out


def _ceiling_geomean(cells) -> float | None:
    """Geometric mean of the cells' copy-rate ceilings, or None where one has none."""
    ceilings = [p.get("ceiling") for _, p in cells]
    return None if None in ceilings else measure.geomean(ceilings)


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def verdict(line: dict, targets) -> str:
    """'met', 'missed: <the bars missed>' or '—' (a line without a target); a missed geomean bar
    above the line's copy-rate ceiling is said to be out of reach."""
    if line["target"] is None:
        return "—"
    shown = {"geomean": ("geomean", _x), "min": ("min", _x), "copy_fraction": ("copy", _pct)}
    missed = [f"{shown[k][0]} < {shown[k][1](targets[k])}" for k, ok in line["target"].items()
              if ok is False]
    unknown = [shown[k][0] for k, ok in line["target"].items() if ok is None]
    text = "missed: " + ", ".join(missed) if missed else "met"
    text += f" ({', '.join(unknown)}: no layer)" if unknown else ""
    ceiling = line.get("ceiling_geomean")
    if line["target"]["geomean"] is False and ceiling is not None and ceiling < targets["geomean"]:
        text += f"; geomean {_x(targets['geomean'])} out of reach (ceiling {_x(ceiling)})"
    return text


def markdown(result: dict) -> str:
    """The summary table (target lines marked) and the per-layer table of one run."""
    targets = result["targets"]
    s = result["settings"]
    bw = result["copy_bandwidth_Bps"]
    lines = [
        f"GPU {result['gpu']} (L2 {result['l2_bytes'] / 2 ** 20:.0f} MiB), commit "
        f"{result['commit']}, {result['date']}; PyTorch {result['torch']}, cuDNN "
        f"{result['cudnn']} (autotuned, TF32 off).  Batch {s['batch']}; x = PyTorch time / "
        "cupyconv time (> 1: cupyconv faster), device time of CUDA-graph replays over operands "
        f"rotated past {s['l2_factor']}x the L2.  Copy rate {bw / 1e12:.2f} TB/s measured in "
        "the run; % copy = bytes a perfect kernel moves per second over it; ceiling = PyTorch "
        "time / the time of a kernel moving the pass's bytes at the copy rate (the most x a "
        "memory-bound kernel can reach).",
        f"Targets (depthwise fp32 NCHW, fp32 NHWC, fp16 NHWC): geomean >= "
        f"{_x(targets['geomean'])}, min >= {_x(targets['min'])}, >= "
        f"{_pct(targets['copy_fraction'])} of the copy rate (geomean over the layers larger "
        "than L2).", "",
        "| family | dtype layout | pass | layers | geomean | min (layer) | use-weighted | "
        "ceiling geomean | % copy > L2: geomean / min (layers) | mismatches | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for line in result["summary"]:
        mark = "**" if line["target"] is not None else ""
        lines.append(
            f"| {line['family']} | {mark}{SHORT[line['dtype']]} {line['layout']}{mark} | "
            f"{line['pass']} | {line['layers']} | {_x(line['geomean'])} | {_x(line['min'])} "
            f"({line['min_layer'] or '—'}) | {_x(line['weighted'])} | "
            f"{_x(line.get('ceiling_geomean'))} | "
            f"{_pct(line['copy_geomean'])} / {_pct(line['copy_min'])} "
            f"({line['over_l2_layers']}) | {line['mismatches']} | {verdict(line, targets)} |")
    passes = [p for p in PASSES if any(p in r["passes"] for r in result["rows"])]
    head = ["family", "layer", "uses", "MB", "> L2", "dtype layout", "auto fwd"]
    for p in passes:
        head += [f"{p} x (ms)", f"{p} % copy"]
    head += ["max err"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fallbacks = []
    for r in result["rows"]:
        uses = ", ".join(f"{net} {n}" for net, n in r["counts"].items())
        cells = [r["family"], r["layer"], uses, f"{r['bytes'] / 1e6:.1f}",
                 "yes" if r["larger_than_l2"] else "no", f"{SHORT[r['dtype']]} {r['layout']}",
                 r.get("auto_forward", "—")]
        for name in passes:
            p = r["passes"].get(name)
            cells += (["—", "—"] if p is None else
                      [f"{_x(p['ratio'])} ({p['ours_ms']:.4f})", _pct(p["frac_copy"])])
            if p is not None and p["timing"] != "graph":
                fallbacks.append(f"{r['layer']} {SHORT[r['dtype']]} {r['layout']} {name}: "
                                 f"{p.get('graph_error', '')}")
        bad = [name for name, p in r["passes"].items() if not p["ok"]]
        worst = max((p["err"] for p in r["passes"].values()), default=None)
        cells.append("—" if worst is None else f"{worst:.1e}" + (
            f" **MISMATCH** ({', '.join(bad)})" if bad else ""))
        lines.append("| " + " | ".join(cells) + " |")
    if fallbacks:
        lines += ["", "Timed as eager calls between events (graph capture failed):"]
        lines += [f"- {f}" for f in fallbacks]
    return "\n".join(lines) + "\n"


def results_stem(kind: str, gpu: str, commit: str, quick: bool) -> str:
    """``<kind>-<gpu>-<commit>[-quick]``, as the other results files are named."""
    return f"{kind}-{gpu.replace(' ', '_')}-{commit}" + ("-quick" if quick else "")


def write_results(result: dict, out_dir, stem: str, text: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out / f"{stem}.md").write_text(text)
    return out / f"{stem}.json"


def main(argv=None) -> int:
    args = parse_args(argv)
    torch = measure.load_torch(quiet=True)  # the message below says it
    if torch is None:
        print("bench_depthwise_nets needs PyTorch with CUDA (the peer)", file=sys.stderr)
        return 2
    tf32 = measure.set_cudnn_tf32(torch, False)
    facts = {**measure.device_facts(), **measure.torch_facts(torch)}
    copy_rate = measure.copy_bandwidth()
    plan = [(entry, dtype, layout) for entry in bench_layers(args.nets, args.quick)
            for dtype, layout in row_combos(entry.family, args.dtypes, args.layouts, args.quick)]
    progress(f"GPU {facts['gpu']} (L2 {facts['l2_bytes'] / 2 ** 20:.0f} MiB); torch "
             f"{facts['torch']}, cuDNN {facts['cudnn']}; commit {git_commit()}; copy rate "
             f"{copy_rate / 1e12:.2f} TB/s; {len(plan)} rows x {len(args.passes)} passes")
    t0 = time.perf_counter()
    rows = []
    for i, (entry, dtype, layout) in enumerate(plan, start=1):
        rows.append(measure_row(entry, dtype, layout, args.passes, torch, facts["l2_bytes"],
                                copy_rate, args))
        progress(f"{i:3d}/{len(plan)} {row_line(rows[-1])}")
        measure.release_memory(torch)  # the row's copies: up to ~1 GB in both pools
    result = {"benchmark": "depthwise_nets", **facts, "python": platform.python_version(),
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "copy_bandwidth_Bps": copy_rate,
              "settings": {"batch": BATCH, "nets": args.nets, "quick": args.quick,
                           "repeat": args.repeat, "target_ms": args.target_ms,
                           "l2_factor": measure.L2_FACTOR, "max_copies": ROTATION_CAP,
                           "graph_min_ms": measure.GRAPH_MIN_MS, "cudnn_benchmark": True,
                           "cudnn_tf32": tf32},
              "targets": args.targets, "rows": rows,
              "summary": summary(rows, args.targets), "seconds": time.perf_counter() - t0}
    text = markdown(result)
    path = write_results(result, args.out, results_stem("depthwise-nets", facts["gpu"],
                                                        result["commit"], args.quick), text)
    print(text)
    progress(f"{len(rows)} rows in {result['seconds']:.0f} s; wrote {path} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
