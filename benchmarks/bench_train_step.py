"""Training-step convolutions of ResNet-50, EfficientNet-B0 and ConvNeXt-T against cuDNN.

Issue 46, item 5.

    python3 benchmarks/bench_train_step.py [--out DIR] [--precisions bf16,tf32]
        [--networks resnet50,efficientnet_b0,convnext_t] [--batch 32] [--repeat 3] [--target-ms 5]

Layers: every convolution of the networks (``benchmarks/networks.py``, 224x224 input; ConvNeXt-T's
MLP layers as the 1x1 convs they are), measured once per distinct shape (a shape two networks
share once for both) and counted as many times as the networks have it.  Each shape runs the
three convolutions of a training step -- forward, backward-data, backward-weight -- in

- ``bf16``: bfloat16 NHWC (cupyconv ``layout="NHWC"``) against cuDNN bfloat16 on
  ``torch.channels_last`` tensors (the same memory);
- ``tf32``: float32 NCHW, cupyconv ``precision="tf32"`` against cuDNN float32 with
  ``torch.backends.cudnn.allow_tf32 = True``.

PyTorch runs ``F.conv2d`` and, as autograd calls it, ``aten.convolution_backward`` with the real
x and w (``bench_depthwise_nets.peer_calls``), cuDNN autotuned (``cudnn.benchmark = True``) and
warmed up before timing.  Device time: operands rotate over copies spanning at least 3x the L2,
the calls over them are captured into a CUDA graph and replayed between CUDA events
(``measure.device_times``; both sides as eager calls between events where a capture fails).
Ratio = cuDNN time / ours (> 1: cupyconv faster).

Per network and precision: the training-step convolution time of ours and of cuDNN (each shape's
time of the three passes times its count, summed), their ratio, the same per pass, the geometric
mean per pass over the distinct shapes, and the worst shapes (lowest ratio of their step time).

Correctness: each shape's three results (of the first copy) are checked once against PyTorch's
float64 result on the same inputs, within the bound of ``cupyconv._core.verify``: bf16 2x the
error of the float64 result rounded to bfloat16 (``tolerance``), TF32 2x the error of the float64
result on TF32-rounded inputs (``tf32_tolerance``), both computed on the GPU.  A failure is
flagged in the progress line, the JSON and the tables, not fatal; cuDNN's own error is recorded
beside ours for context.

Writes ``train-step-<gpu>-<commit>.json`` and ``.md`` into ``--out`` (one progress line per
shape on stderr, the tables on stdout).  About 85 shapes x 2 precisions: a few minutes on an
H200 with the kernels in the disk cache (a first run compiles them).
"""

from __future__ import annotations

import argparse
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
from bench_depthwise_nets import peer_calls, results_stem, write_results  # noqa: E402
from cupyconv._core.dtypes import itemsize  # noqa: E402
from cupyconv._core.verify import HALF_FACTOR, HALF_FLOOR, TF32_FACTOR  # noqa: E402
from networks import NETWORKS, Layer, distinct_layers, total_macs  # noqa: E402

NETS = ("resnet50", "efficientnet_b0", "convnext_t")
# label -> (storage dtype, cupyconv precision, layout); cuDNN at the same dtype, channels_last
# where the layout is NHWC, TF32 allowed where the label is tf32
PRECISIONS = {"bf16": ("bfloat16", "exact", "NHWC"), "tf32": ("float32", "tf32", "NCHW")}
PASSES = ("forward", "backward-data", "backward-weight")
SHORT = {"forward": "fwd", "backward-data": "data", "backward-weight": "wgt"}
BATCH = 32
# The smallest shapes (EfficientNet's squeeze-excitation convs on 1x1 maps) move kilobytes:
# measure.MAX_COPIES copies of mid-sized ones would not span 3x the L2
ROTATION_CAP = 32
WORST = 3  # worst shapes listed per network and precision
TF32_FLOOR = 1e-6  # verify.tf32_tolerance's floor (float32 accumulation)
_T0 = time.perf_counter()


class BenchLayer(NamedTuple):
    """One distinct layer shape: the first layer of that shape and how many each network has."""

    layer: Layer
    counts: tuple[tuple[str, int], ...]

    @property
    def label(self) -> str:
        return layer_label(self.layer)


def layer_label(layer: Layer) -> str:
    """A shape's name: kind, kernel, stride, padding, channels in -> out, input size."""
    kind = "dw" if layer.depthwise else ("conv" if layer.groups == 1 else f"g{layer.groups}")
    k = layer.kernel
    return (f"{kind} {k}x{k} s{layer.stride} p{layer.padding} {layer.in_channels}->"
            f"{layer.out_channels} {layer.H}^2")


def bench_layers(nets=NETS) -> list[BenchLayer]:
    """The distinct layer shapes of ``nets``, in network order, each with its counts."""
    return [BenchLayer(layer, tuple(counts.items()))
            for layer, counts in distinct_layers({net: NETWORKS[net]() for net in nets})]


def parse_args(argv=None) -> argparse.Namespace:
    """The options, the comma lists split into lists in the tables' order (an unknown or empty
    one, or a batch or repeat below 1, is a usage error)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--networks", default=",".join(NETS),
                        help=f"comma-separated, among {', '.join(NETS)}")
    parser.add_argument("--precisions", default=",".join(PRECISIONS),
                        help=f"comma-separated, among {', '.join(PRECISIONS)}")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--repeat", type=int, default=3, help="timed samples per measurement")
    parser.add_argument("--target-ms", type=float, default=5.0, help="length of one sample")
    args = parser.parse_args(argv)
    for name, choices in (("networks", NETS), ("precisions", tuple(PRECISIONS))):
        values = [v for v in getattr(args, name).split(",") if v]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            parser.error(f"--{name}: {unknown or 'nothing'} not among {', '.join(choices)}")
        setattr(args, name, [v for v in choices if v in values])
    if args.batch < 1 or args.repeat < 1 or args.target_ms <= 0:
        parser.error("--batch and --repeat must be >= 1, --target-ms > 0")
    return args


def allowed_error(label: str, rounding_error: float) -> float:
    """The largest relative error of our ``label`` result against the float64 reference, given
    ``rounding_error``: for bf16 the error of the reference rounded to bfloat16, for tf32 that of
    the float64 result on TF32-rounded inputs.  ``verify.tolerance`` and
    ``verify.tf32_tolerance``'s bounds, from errors measured on the GPU."""
    if PRECISIONS[label][0] in ("float16", "bfloat16"):
        return HALF_FACTOR * rounding_error + HALF_FLOOR
    return TF32_FACTOR * rounding_error + TF32_FLOOR


def step_flop(nets, batch: int) -> dict[str, float]:
    """FLOP of each network's training-step convolutions: three passes of 2 per multiply-add."""
    return {net: 3 * 2 * total_macs(NETWORKS[net](), batch) for net in nets}


# ------------------------------------------------------------------------------ summing up
def network_totals(rows, nets, precisions, flop=None) -> list[dict]:
    """One line per (network, precision) with rows: per pass and for the whole step (``step``)
    the sum over the network's shapes of count x ms, ours and cuDNN's, and their ratio; the
    geometric mean per pass of the shapes' ratios (each shape once); the worst shapes (lowest
    ratio of their step time; with their share of our step); the mismatches; TFLOP/s where
    ``flop`` (network -> FLOP of the step) is given."""
    out = []
    for net in nets:
        for label in precisions:
            mine = [(r, r["counts"][net]) for r in rows
                    if r["precision"] == label and r["counts"].get(net)]
            if not mine:
                continue
            ours, peer = {}, {}
            for name in PASSES + ("step",):
                keys = PASSES if name == "step" else (name,)
                ours[name] = sum(n * r["passes"][p]["ours_ms"] for r, n in mine for p in keys)
                peer[name] = sum(n * r["passes"][p]["peer_ms"] for r, n in mine for p in keys)
            line = {"network": net, "precision": label, "shapes": len(mine),
                    "convs": sum(n for _, n in mine), "ours_ms": ours, "peer_ms": peer,
                    "ratio": {k: measure.ratio(peer[k], ours[k]) for k in ours},
                    "geomean": {p: measure.geomean([r["passes"][p]["ratio"] for r, _ in mine])
                                for p in PASSES},
                    "worst": worst_layers(mine, ours["step"]),
                    "mismatches": [f"{r['layer']} {p}" for r, _ in mine
                                   for p in PASSES if not r["passes"][p]["ok"]]}
            if flop is not None:
                line["tflops"] = {"ours": flop[net] / ours["step"] / 1e9 if ours["step"] else None,
                                  "peer": flop[net] / peer["step"] / 1e9 if peer["step"] else None}
            out.append(line)
    return out


def layer_step(row: dict) -> tuple[float, float]:
    """(ours, cuDNN's) ms of one shape's three passes."""
    return (sum(row["passes"][p]["ours_ms"] for p in PASSES),
            sum(row["passes"][p]["peer_ms"] for p in PASSES))


def worst_layers(mine, ours_step: float, n: int = WORST) -> list[dict]:
    """The ``n`` shapes of (row, count) pairs with the lowest ratio of their step times, with
    their count and share of our step time (``ours_step`` ms)."""
    out = []
    for r, count in mine:
        ours, peer = layer_step(r)
        out.append({"layer": r["layer"], "count": count, "ratio": measure.ratio(peer, ours),
                    "share": count * ours / ours_step if ours_step else None})
    out.sort(key=lambda w: float("inf") if w["ratio"] is None else w["ratio"])
    return out[:n]


# --------------------------------------------------------------------------------- GPU part
def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f} s] {message}", file=sys.stderr, flush=True)


def our_calls(layer: Layer, batch: int, precision: str, layout: str) -> dict:
    """pass -> call of cupyconv on one copy's (x, w, dy) arrays."""
    opts = dict(stride=layer.stride, padding=layer.padding, groups=layer.groups, layout=layout,
                precision=precision)
    x_shape, w_shape = layer.input_shape(batch, layout), layer.weight_shape(layout)
    return {"forward": lambda ops: cupyconv.conv(ops[0], ops[1], **opts),
            "backward-data": lambda ops: cupyconv.conv_backward_data(ops[2], ops[1], x_shape,
                                                                     **opts),
            "backward-weight": lambda ops: cupyconv.conv_backward_weight(ops[0], ops[2], w_shape,
                                                                         **opts)}


def round_tf32(torch, t):
    """float32 values rounded to TF32 as ``verify.round_tf32`` rounds them (10 mantissa bits,
    nearest, ties away from zero), on the GPU; the operands are finite."""
    return ((t.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)


def check_pass(torch, label: str, nhwc: bool, ours, peer, arrays, tensors) -> dict:
    """Our result of one pass against PyTorch's float64 one on the same (first copy's) operands:
    our relative error, the bound (:func:`allowed_error`), ok, and cuDNN's error beside it."""
    bench = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False  # no autotuning of the float64 references
    try:
        ref = peer(tuple(t.double() for t in tensors))
        if label == "tf32":
            best = peer(tuple(round_tf32(torch, t).double() for t in tensors))
            rounding = measure.rel_err_gpu(best, ref)
            del best
        else:
            rounding = measure.rel_err_gpu(ref.to(measure.torch_dtype(torch, PRECISIONS[label][0])),
                                           ref)
    finally:
        torch.backends.cudnn.benchmark = bench
    peer_err = measure.rel_err_gpu(peer(tensors), ref)  # (the first call also autotunes)
    err = measure.rel_err_gpu(ours(arrays), ref.permute(0, 2, 3, 1).contiguous() if nhwc else ref)
    tol = allowed_error(label, rounding)
    return {"err": err, "tol": tol, "ok": err <= tol, "peer_err": peer_err}


def measure_row(entry: BenchLayer, label: str, torch, l2_bytes: int, args) -> dict:
    """The three passes of one shape at one precision, ours and cuDNN's, checked and timed."""
    dtype, precision, layout = PRECISIONS[label]
    layer, nhwc, batch = entry.layer, layout == "NHWC", args.batch
    nbytes = itemsize(dtype) * (layer.input_elements(batch) + layer.weight_elements()
                                + layer.output_elements(batch))
    copies = measure.rotation_copies(l2_bytes, nbytes, cap=ROTATION_CAP)
    shapes = (layer.input_shape(batch), layer.weight_shape(), layer.output_shape(batch))
    tensors = measure.torch_operand_copies(torch, shapes, dtype, nhwc, copies,
                                           seed=zlib.crc32(f"{entry.label} {label}".encode()))
    arrays = [tuple(measure.cupy_view(t, nhwc) for t in ops) for ops in tensors]
    ours, peer = our_calls(layer, batch, precision, layout), peer_calls(torch, layer)
    row = {"layer": entry.label, "first": layer.name, "counts": dict(entry.counts),
           "precision": label, "dtype": dtype, "layout": layout,
           "shape": {"C": layer.in_channels, "K": layer.out_channels, "H": layer.H, "W": layer.W,
                     "kernel": layer.kernel, "stride": layer.stride, "padding": layer.padding,
                     "groups": layer.groups, "out_H": layer.out_H, "out_W": layer.out_W},
           "gflop": 2 * layer.macs(batch) / 1e9, "bytes": nbytes, "copies": copies,
           "passes": {}}
    for name in PASSES:
        check = check_pass(torch, label, nhwc, ours[name], peer[name], arrays[0], tensors[0])
        times, how, why = measure.ours_and_torch_times(
            torch, ours[name], arrays, peer[name], tensors, repeat=args.repeat,
            target_ms=args.target_ms, log=progress)
        row["passes"][name] = {"ours_ms": times["ours"], "peer_ms": times["peer"],
                               "ratio": measure.ratio(times["peer"], times["ours"]),
                               **check, "timing": how}
        if why:
            row["passes"][name]["graph_error"] = why
    return row


def row_line(row: dict) -> str:
    """One progress line: the shape, its counts, per pass our ms / cuDNN's ms (ratio)."""
    cells = []
    for name, p in row["passes"].items():
        flag = "" if p["ok"] else f" MISMATCH err {p['err']:.1e} > {p['tol']:.1e}"
        cells.append(f"{SHORT[name]} {p['ours_ms']:.4f}/{p['peer_ms']:.4f} {_x(p['ratio'])}{flag}")
    uses = ",".join(f"{net}x{n}" for net, n in row["counts"].items())
    return f"{row['precision']} {row['layer']:30s} [{uses}]  " + "  ".join(cells)


# ------------------------------------------------------------------------------------ report
def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _ms(v) -> str:
    return "—" if v is None else f"{v:.2f}"


def markdown(result: dict) -> str:
    """The per-network step table and the per-shape table of one run."""
    s = result["settings"]
    lines = [
        f"GPU {result['gpu']} (L2 {result['l2_bytes'] / 2 ** 20:.0f} MiB), commit "
        f"{result['commit']}, {result['date']}; PyTorch {result['torch']}, cuDNN "
        f"{result['cudnn']} (autotuned).  Batch {s['batch']}, 224x224; the convolutions of a "
        "training step (forward, backward-data, backward-weight of every conv layer); bf16 = "
        "bfloat16 NHWC vs cuDNN channels_last, tf32 = float32 NCHW with TF32 on both sides.  "
        "x = cuDNN time / cupyconv time (> 1: cupyconv faster); device time of CUDA-graph "
        f"replays over operands rotated past {s['l2_factor']}x the L2, each distinct shape "
        "timed once and counted as often as the network has it.", "",
        "| network | precision | convs (shapes) | ours ms | cuDNN ms | step x | fwd x | data x "
        "| wgt x | geomean fwd / data / wgt | ours / cuDNN TFLOP/s | worst shapes (x, share "
        "of our step) | mismatches |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in result["networks"]:
        worst = "; ".join(f"{w['layer']} x{w['count']} ({_x(w['ratio'])}, "
                          f"{100 * (w['share'] or 0):.0f} %)" for w in t["worst"])
        tf = t.get("tflops") or {}
        lines.append(
            f"| {t['network']} | {t['precision']} | {t['convs']} ({t['shapes']}) | "
            f"{_ms(t['ours_ms']['step'])} | {_ms(t['peer_ms']['step'])} | "
            f"**{_x(t['ratio']['step'])}** | "
            + " | ".join(_x(t["ratio"][p]) for p in PASSES) + " | "
            + " / ".join(_x(t["geomean"][p]) for p in PASSES) + " | "
            f"{tf.get('ours') or 0:.0f} / {tf.get('peer') or 0:.0f} | {worst} | "
            f"{len(t['mismatches'])} |")
    head = ["precision", "shape", "uses"] + [f"{SHORT[p]} ms ours / cuDNN (x)" for p in PASSES]
    head += ["max err / bound"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fallbacks = []
    for r in result["rows"]:
        uses = ", ".join(f"{net} {n}" for net, n in r["counts"].items())
        cells = [r["precision"], r["layer"], uses]
        for name in PASSES:
            p = r["passes"][name]
            cells.append(f"{p['ours_ms']:.4f} / {p['peer_ms']:.4f} ({_x(p['ratio'])})")
            if p["timing"] != "graph":
                fallbacks.append(f"{r['precision']} {r['layer']} {name}: "
                                 f"{p.get('graph_error', '')}")
        worst = max(r["passes"].values(), key=lambda p: p["err"] / p["tol"])
        bad = [SHORT[name] for name, p in r["passes"].items() if not p["ok"]]
        cells.append(f"{worst['err']:.1e} / {worst['tol']:.1e}"
                     + (f" **MISMATCH** ({', '.join(bad)})" if bad else ""))
        lines.append("| " + " | ".join(cells) + " |")
    if fallbacks:
        lines += ["", "Timed as eager calls between events (graph capture failed):"]
        lines += [f"- {f}" for f in fallbacks]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    torch = measure.require_torch("bench_train_step")  # cudnn.benchmark = True
    facts = {**measure.device_facts(), **measure.torch_facts(torch)}
    entries = bench_layers(args.networks)
    plan = [(label, entry) for label in args.precisions for entry in entries]
    commit = git_commit()
    progress(f"GPU {facts['gpu']} (L2 {facts['l2_bytes'] / 2 ** 20:.0f} MiB); torch "
             f"{facts['torch']}, cuDNN {facts['cudnn']}; commit {commit}; batch {args.batch}; "
             f"{len(entries)} shapes x {len(args.precisions)} precisions")
    t0 = time.perf_counter()
    rows, tf32 = [], {}
    for i, (label, entry) in enumerate(plan, start=1):
        tf32[label] = measure.set_cudnn_tf32(torch, label == "tf32")
        rows.append(measure_row(entry, label, torch, facts["l2_bytes"], args))
        progress(f"{i:3d}/{len(plan)} {row_line(rows[-1])}")
        measure.release_memory(torch)  # the shape's copies and references
    measure.set_cudnn_tf32(torch, False)
    result = {"benchmark": "train_step", **facts, "python": platform.python_version(),
              "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "settings": {"batch": args.batch, "networks": args.networks,
                           "precisions": {label: dict(zip(("dtype", "precision", "layout"),
                                                          PRECISIONS[label]))
                                          for label in args.precisions},
                           "repeat": args.repeat, "target_ms": args.target_ms,
                           "l2_factor": measure.L2_FACTOR, "max_copies": ROTATION_CAP,
                           "graph_min_ms": measure.GRAPH_MIN_MS, "cudnn_benchmark": True,
                           "cudnn_tf32": tf32},
              "rows": rows,
              "networks": network_totals(rows, args.networks, args.precisions,
                                         step_flop(args.networks, args.batch)),
              "seconds": time.perf_counter() - t0}
    text = markdown(result)
    path = write_results(result, args.out, results_stem("train-step", facts["gpu"], commit,
                                                        False), text)
    print(text)
    for t in result["networks"]:
        if t["mismatches"]:
            progress(f"MISMATCH {t['network']} {t['precision']}: {', '.join(t['mismatches'])}")
    progress(f"{len(rows)} rows in {result['seconds']:.0f} s; wrote {path} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
