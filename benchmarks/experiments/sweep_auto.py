"""Does ``method="auto"`` pick the fastest forward algorithm? (issue 17, item 3)

    python3 benchmarks/experiments/sweep_auto.py [--out DIR] [--repeat 3] [--quick]
        [--nets mobilenetv2,efficientnet_b0,resnext50_32x4d] [--dtypes float32,float16]
        [--layouts NCHW,NHWC]

Problems: the layers of bench_depthwise_nets.py (the distinct depthwise convs of MobileNetV2
and EfficientNet-B0, the grouped 3x3 convs of ResNeXt-50 32x4d; batch 32) in both layouts, in
float32 and float16: 26 layers x 4 = 104 problems.  For each, every explicit forward method of
the registry that runs it (``cupyconv.conv(..., method=m)``; one that refuses the problem is
listed with its reason, one that fails with its error) and ``auto`` are timed on the same
operands, rotated past 3x the L2, as replayed CUDA graphs (the timing of
bench_depthwise_nets.py; no PyTorch).  Each row records what auto runs and the cost model's
estimate of every method (``describe``), checks each method's output against auto's (flagged
above ``AGREEMENT``), and gives auto's time over the fastest explicit method's: within
``WITHIN`` (10 %) counts as a right pick.

Summary, per family and over all problems: the fraction within 10 %, how often auto ran the
fastest method, the worst case.  Writes ``auto-sweep-<gpu>-<commit>[-quick].json`` and ``.md``
into ``--out`` (progress on stderr, the tables on stdout); ``benchmarks/report.py`` renders the
JSON.  About 3 minutes on an H100 once the kernels are in the disk cache; the slow methods (the
direct kernel, the GEMM paths on depthwise problems) take most of it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import git_commit  # noqa: E402
from bench_depthwise_nets import (BATCH, FAMILIES, LAYOUTS, NETS, QUICK_COMBOS,  # noqa: E402
                                  ROTATION_CAP, SHORT, bench_layers, geometry, progress,
                                  results_stem, split_choices, write_results)
from cupyconv._core.dtypes import itemsize  # noqa: E402
from cupyconv._core.verify import AGREEMENT  # noqa: E402

DTYPES = ("float32", "float16")
WITHIN = 1.10  # auto within 10 % of the fastest explicit method: a right pick


def sweep_combos(dtypes=DTYPES, layouts=LAYOUTS, quick: bool = False) -> list[tuple]:
    return [(d, lay) for d in DTYPES for lay in LAYOUTS if d in dtypes and lay in layouts
            and (not quick or (d, lay) in QUICK_COMBOS)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--nets", default=",".join(NETS), help="networks whose layers run")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--repeat", type=int, help="timed samples per measurement (default 5, "
                        "3 with --quick)")
    parser.add_argument("--target-ms", type=float, default=10.0, help="length of one sample")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: bench_depthwise_nets.py's --quick layers and rows")
    args = parser.parse_args(argv)
    split_choices(parser, args, {"nets": NETS, "dtypes": DTYPES, "layouts": LAYOUTS})
    return args


def auto_verdict(ms: dict) -> tuple[str | None, float | None, bool | None]:
    """(fastest explicit method, auto ms / its ms, within WITHIN?) of {method: ms} with "auto";
    Nones where no explicit method was timed."""
    explicit = {m: t for m, t in ms.items() if m != "auto"}
    if not explicit:
        return None, None, None
    best = min(explicit, key=explicit.get)
    over = measure.ratio(ms["auto"], explicit[best])
    return best, over, over is not None and over <= WITHIN


def measure_problem(entry, dtype: str, layout: str, l2_bytes: int, args) -> dict:
    """Every forward method that runs one layer in one dtype and layout, and auto."""
    import cupy

    from cupyconv._dispatch.choose import describe
    from cupyconv._dispatch.forward import forward_methods

    layer = entry.layer
    geom = geometry(layer, dtype, layout)
    nbytes = geom.bytes_moved(itemsize(dtype))
    copies = measure.rotation_copies(l2_bytes, nbytes, cap=ROTATION_CAP)
    rng = cupy.random.default_rng(zlib.crc32(f"{entry.label} {dtype} {layout}".encode()))
    arrays = [tuple(rng.uniform(-1, 1, shape, dtype=cupy.float32).astype(dtype)
                    for shape in (geom.input_shape, geom.weight_shape)) for _ in range(copies)]
    opts = dict(stride=layer.stride, padding=layer.padding, groups=layer.groups, layout=layout)
    # "auto" first: the reference every explicit method's output is checked against
    methods = ("auto",) + tuple(m for m in forward_methods() if m != "auto")
    calls, outs, refused, failed, estimated = {}, {}, {}, {}, {}
    for m in methods:
        call = (lambda ops, m=m: cupyconv.conv(ops[0], ops[1], method=m, **opts))
        try:
            outs[m] = call(arrays[0])  # (also compiles and prepares)
        except ValueError as exc:  # the method does not run this problem
            refused[m] = str(exc)
            continue
        except Exception as exc:  # an applicable method that breaks: report it, go on
            if m == "auto":
                raise
            failed[m] = f"{type(exc).__name__}: {exc}"
            continue
        calls[m] = (call, arrays, measure.cupy_graph_ms)
        estimated[m] = describe(geom, m)["estimated_ms"]
    errs = {m: measure.rel_err_gpu(out, outs["auto"]) for m, out in outs.items() if m != "auto"}
    del outs
    times, how, why = measure.device_times(calls, repeat=args.repeat, target_ms=args.target_ms,
                                           log=progress)
    best, over, within = auto_verdict(times)
    row = {"family": entry.family, "layer": entry.label, "counts": dict(entry.counts),
           "dtype": dtype, "layout": layout, "bytes": nbytes, "copies": copies,
           "picked": describe(geom)["algorithm"], "ms": times, "estimated_ms": estimated,
           "err": errs, "mismatch": sorted(m for m, e in errs.items() if e > AGREEMENT[dtype]),
           "refused": refused, "failed": failed, "best": best, "auto_over_best": over,
           "within": within, "timing": how}
    if why:
        row["graph_error"] = why
    return row


def row_line(row: dict) -> str:
    times = "  ".join(f"{m} {t:.4f}" for m, t in row["ms"].items())
    flags = "".join(f"  MISMATCH {m}" for m in row["mismatch"])
    flags += "".join(f"  FAILED {m}" for m in row["failed"])
    return (f"{row['layer']:22s} {SHORT[row['dtype']]} {row['layout']}  auto ran {row['picked']}, "
            f"fastest {row['best']}, auto/fastest {_x(row['auto_over_best'])}  ({times} ms)"
            + flags)


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def sweep_summary(rows) -> dict:
    """Per family and over "all" problems: how many, how many with auto within WITHIN of the
    fastest, how many where auto ran the fastest method, and the worst auto / fastest."""
    out = {}
    groups = {"all": rows, **{f: [r for r in rows if r["family"] == f] for f in FAMILIES}}
    for name, sel in groups.items():
        judged = [r for r in sel if r["auto_over_best"] is not None]
        if not judged:
            continue
        worst = max(judged, key=lambda r: r["auto_over_best"])
        within = sum(bool(r["within"]) for r in judged)
        out[name] = {"problems": len(judged), "within": within,
                     "fraction_within": within / len(judged),
                     "picked_fastest": sum(r["picked"] == r["best"] for r in judged),
                     "worst": {k: worst[k] for k in ("layer", "dtype", "layout", "picked", "best",
                                                     "auto_over_best")}}
    return out


def markdown(result: dict) -> str:
    """The summary and the per-problem table (ms of every method, the cost model's estimate)."""
    within = f"{round(100 * (WITHIN - 1))} %"
    lines = [f"GPU {result['gpu']}, commit {result['commit']}, {result['date']}; forward, batch "
             f"{result['settings']['batch']}, device time of CUDA-graph replays over operands "
             f"rotated past {result['settings']['l2_factor']}x the L2.  auto / fastest = auto's "
             f"time over the fastest explicit method's; within {within} counts as a right pick.",
             "", f"| problems | count | auto within {within} | auto ran the fastest | "
             "worst auto / fastest |",
             "|---|---|---|---|---|"]
    for name, s in result["summary"].items():
        w = s["worst"]
        lines.append(f"| {name} | {s['problems']} | {s['within']} "
                     f"({100 * s['fraction_within']:.0f} %) | {s['picked_fastest']} | "
                     f"{_x(w['auto_over_best'])} ({w['layer']} {SHORT[w['dtype']]} "
                     f"{w['layout']}: ran {w['picked']}, fastest {w['best']}) |")
    methods = list(dict.fromkeys(m for r in result["rows"] for m in r["ms"] if m != "auto"))
    head = ["family", "layer", "dtype layout", "auto ran", "fastest", "auto / fastest",
            "auto ms"] + [f"{m} ms (est)" for m in methods] + ["not run", "checks"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [r["family"], r["layer"], f"{SHORT[r['dtype']]} {r['layout']}", r["picked"],
                 r["best"] or "—",
                 _x(r["auto_over_best"]) + ("" if r["within"] is not False else " **off**"),
                 f"{r['ms']['auto']:.4f}"]
        for m in methods:
            t, est = r["ms"].get(m), r["estimated_ms"].get(m)
            cells.append("—" if t is None else f"{t:.4f} ({est:.4f})" if est is not None
                         else f"{t:.4f}")
        not_run = [f"{m} (refused)" for m in r["refused"]] + [f"{m} (failed)" for m in r["failed"]]
        cells.append(", ".join(not_run) or "—")
        checks = [f"**MISMATCH** {m} ({r['err'][m]:.1e})" for m in r["mismatch"]]
        checks += [f"**FAILED** {m}: {e}" for m, e in r["failed"].items()]
        checks += [f"timed eagerly ({r.get('graph_error', '')})"] if r["timing"] != "graph" else []
        cells.append("; ".join(checks) or "ok")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    facts = measure.device_facts()
    plan = [(entry, dtype, layout) for entry in bench_layers(args.nets, args.quick)
            for dtype, layout in sweep_combos(args.dtypes, args.layouts, args.quick)]
    progress(f"GPU {facts['gpu']} (L2 {facts['l2_bytes'] / 2 ** 20:.0f} MiB); commit "
             f"{git_commit()}; {len(plan)} problems")
    t0 = time.perf_counter()
    rows = []
    for i, (entry, dtype, layout) in enumerate(plan, start=1):
        rows.append(measure_problem(entry, dtype, layout, facts["l2_bytes"], args))
        progress(f"{i:3d}/{len(plan)} {row_line(rows[-1])}")
        measure.release_memory(None)
    result = {"benchmark": "auto_sweep", **facts, "python": platform.python_version(),
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "settings": {"batch": BATCH, "nets": args.nets, "quick": args.quick,
                           "autotune": os.environ.get("CUPYCONV_AUTOTUNE"),
                           "repeat": args.repeat, "target_ms": args.target_ms,
                           "l2_factor": measure.L2_FACTOR, "max_copies": ROTATION_CAP,
                           "graph_min_ms": measure.GRAPH_MIN_MS, "within": WITHIN},
              "rows": rows, "summary": sweep_summary(rows), "seconds": time.perf_counter() - t0}
    text = markdown(result)
    path = write_results(result, args.out, results_stem("auto-sweep", facts["gpu"],
                                                        result["commit"], args.quick), text)
    print(text)
    progress(f"{len(rows)} problems in {result['seconds']:.0f} s; wrote {path} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
