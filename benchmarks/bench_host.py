"""Host-overhead benchmark (issue 15): Python microseconds per warm call, one row per operation.

    python3 benchmarks/bench_host.py --out DIR [--loops 7] [--calls 50]

Problems are tiny (x of (1, 32, 14, 14) float32, 3x3 kernels, a 64^3 GEMM, a 64x64 image) so
that the device finishes each call's kernels before the host has issued the next call: what is
measured is the Python time per call (``host_overhead_us``: a loop of ``--calls`` warm calls
without synchronizing, median of ``--loops`` loops).  The target is 15 µs per warm call
(DESIGN.md section 2); ``meets_target`` says whether a row meets it.  PyTorch's
``F.conv2d`` on the same 3x3 problem is the reference row.

``graph_us``: device µs per call when 100 calls are captured into one CUDA graph and replayed
(the graph's replay time / 100): the rows' cost with the host taken out.  Rows that cannot be
captured record the error instead.

Foreign rows (issue 47): the same calls with PyTorch tensors (and Numba device arrays, where
Numba's CUDA target works) that view the CuPy arrays' memory, against the calls with the CuPy
arrays themselves: ``ratio`` is the host time with the foreign arrays over the host time with
CuPy arrays (the CuPy twin measured just before and after, averaged); the target is 1.2.

Writes ``host-<gpu>-<commit>.json`` into ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import git_commit  # noqa: E402

TARGET_US = 15.0
GRAPH_CALLS = 100
FOREIGN_TARGET = 1.2  # host time with another library's arrays / with CuPy arrays
FOREIGN_ROUNDS = 3


def meets_target(host_us, target: float = TARGET_US) -> bool | None:
    return None if host_us is None else host_us <= target


def cupyconv_calls() -> tuple[list[tuple[str, str, object]], tuple]:
    """The rows, (name, what it calls, zero-argument function) each, on small fresh random
    arrays; and (x, w) of the 3x3 problem for the PyTorch reference row."""
    import cupy

    rng = cupy.random.default_rng(15)

    def u(*shape):
        return rng.uniform(-1, 1, shape, dtype=cupy.float32)

    x, w3, w1 = u(1, 32, 14, 14), u(32, 32, 3, 3), u(32, 32, 1, 1)
    wd, b, dy = u(32, 1, 3, 3), u(32), u(1, 32, 14, 14)
    dy2 = u(1, 32, 7, 7)                                   # stride 2, pad 1: 14 -> 7
    xl, w3l, dyl = (cupy.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in (x, w3, dy))
    wt = u(32, 32, 3, 3)                                   # (C_in, C_out, kh, kw)
    col = cupyconv.im2col(x, 3, padding=1)
    a, bm = u(64, 64), u(64, 64)
    img, k = u(64, 64), u(3, 3)
    c = cupyconv
    return [
        ("conv 3x3 NCHW implicit_gemm", "conv(x, w, padding=1, method='implicit_gemm')",
         lambda: c.conv(x, w3, padding=1, method="implicit_gemm")),
        ("conv 3x3 NHWC", "conv(x, w, padding=1, layout='NHWC')",
         lambda: c.conv(xl, w3l, padding=1, layout="NHWC")),
        ("conv 1x1 NCHW", "conv(x, w)", lambda: c.conv(x, w1)),
        ("conv depthwise 3x3", "conv(x, w, padding=1, groups=32)",
         lambda: c.conv(x, wd, padding=1, groups=32)),
        ("conv 3x3 + bias", "conv(x, w, b, padding=1)", lambda: c.conv(x, w3, b, padding=1)),
        ("conv_backward_data s1", "conv_backward_data(dy, w, x.shape, padding=1)",
         lambda: c.conv_backward_data(dy, w3, x.shape, padding=1)),
        ("conv_backward_data s2", "conv_backward_data(dy, w, x.shape, stride=2, padding=1)",
         lambda: c.conv_backward_data(dy2, w3, x.shape, stride=2, padding=1)),
        ("conv_backward_weight NCHW", "conv_backward_weight(x, dy, w.shape, padding=1)",
         lambda: c.conv_backward_weight(x, dy, w3.shape, padding=1)),
        ("conv_backward_weight NHWC",
         "conv_backward_weight(x, dy, w.shape, padding=1, layout='NHWC')",
         lambda: c.conv_backward_weight(xl, dyl, w3l.shape, padding=1, layout="NHWC")),
        ("conv_transpose s2", "conv_transpose(x, w, stride=2, padding=1, output_padding=1)",
         lambda: c.conv_transpose(dy2, wt, stride=2, padding=1, output_padding=1)),
        ("separable_conv", "separable_conv(x, w_dw, w_pw, padding=1)",
         lambda: c.separable_conv(x, wd, w1, padding=1)),
        ("im2col", "im2col(x, 3, padding=1)", lambda: c.im2col(x, 3, padding=1)),
        ("col2im", "col2im(col, x.shape, 3, padding=1)",
         lambda: c.col2im(col, x.shape, 3, padding=1)),
        ("gemm 64x64x64", "gemm(a, b)", lambda: c.gemm(a, bm)),
        ("signal.correlate2d 64x64 3x3 same", "signal.correlate2d(img, k, mode='same')",
         lambda: c.signal.correlate2d(img, k, mode="same")),
    ], (x, w3)


def foreign_calls() -> list[tuple[str, str, object, dict]]:
    """The foreign rows: (name, what it calls, function of a dict of arrays, that dict of CuPy
    arrays); the same call runs on the CuPy arrays and on other libraries' views of them."""
    import cupy

    from cupyconv import cudnn

    rng = cupy.random.default_rng(47)

    def u(*shape, dtype=cupy.float32):
        return rng.uniform(-1, 1, shape, dtype=cupy.float32).astype(dtype)

    x, w3, w1, b = u(1, 32, 14, 14), u(32, 32, 3, 3), u(32, 32, 1, 1), u(32)
    dy, dy2, wt, wd = u(1, 32, 14, 14), u(1, 32, 7, 7), u(32, 32, 3, 3), u(32, 1, 3, 3)
    from ml_dtypes import bfloat16 as bf16
    xl, wl = u(1, 14, 14, 32, dtype=bf16), u(32, 3, 3, 32, dtype=bf16)
    c = cupyconv
    return [
        ("conv 3x3 NCHW", "conv(x, w, padding=1)",
         lambda a: c.conv(a["x"], a["w"], padding=1), dict(x=x, w=w3)),
        ("conv 3x3 + bias", "conv(x, w, b, padding=1)",
         lambda a: c.conv(a["x"], a["w"], a["b"], padding=1), dict(x=x, w=w3, b=b)),
        ("conv 1x1 + bias, out=", "conv(x, w, b, out=y)",
         lambda a: c.conv(a["x"], a["w"], a["b"], out=a["y"]),
         dict(x=x, w=w1, b=b, y=cupy.empty((1, 32, 14, 14), cupy.float32))),
        ("conv 3x3 NHWC bfloat16", "conv(x, w, padding=1, layout='NHWC')",
         lambda a: c.conv(a["x"], a["w"], padding=1, layout="NHWC"), dict(x=xl, w=wl)),
        ("conv_backward_data s2", "conv_backward_data(dy, w, x.shape, stride=2, padding=1)",
         lambda a: c.conv_backward_data(a["dy"], a["w"], (1, 32, 14, 14), stride=2, padding=1),
         dict(dy=dy2, w=w3)),
        ("conv_backward_weight NCHW", "conv_backward_weight(x, dy, w.shape, padding=1)",
         lambda a: c.conv_backward_weight(a["x"], a["dy"], (32, 32, 3, 3), padding=1),
         dict(x=x, dy=dy)),
        ("conv_transpose s2 + bias",
         "conv_transpose(x, w, b, stride=2, padding=1, output_padding=1)",
         lambda a: c.conv_transpose(a["x"], a["w"], a["b"], stride=2, padding=1,
                                    output_padding=1), dict(x=dy2, w=wt, b=b)),
        ("separable_conv", "separable_conv(x, w_dw, w_pw, padding=1)",
         lambda a: c.separable_conv(a["x"], a["w_dw"], a["w_pw"], padding=1),
         dict(x=x, w_dw=wd, w_pw=w1)),
        ("cudnn.convolution_forward", "convolution_forward(x, W, b, y, (1, 1), ...)",
         lambda a: cudnn.convolution_forward(a["x"], a["W"], a["b"], a["y"], (1, 1), (1, 1),
                                             (1, 1), 1, auto_tune=False, tensor_core="never"),
         dict(x=x, W=w3, b=b, y=cupy.empty((1, 32, 14, 14), cupy.float32))),
    ]


def foreign_views(torch) -> dict:
    """{library: function viewing a CuPy array without a copy} for the libraries present."""
    views = {}
    if torch is not None:
        views["torch"] = torch.from_dlpack
    try:
        from numba import cuda

        if cuda.is_available():
            views["numba"] = cuda.as_cuda_array
    except Exception:  # no Numba, or no CUDA target for it
        pass
    return views


def measure_foreign_row(name, call, fn, arrays, views, args) -> list[dict]:
    """One row per library: host µs per warm call with its views of ``arrays`` and with the
    CuPy arrays, and their ratio."""
    rows = []
    for library, view in views.items():
        row = {"op": name, "call": call, "input": library, "host_us": None, "cupy_host_us": None,
               "ratio": None, "meets_target": None, "error": None}
        try:
            foreign = {k: view(a) for k, a in arrays.items()}
            cupy_fn, foreign_fn = (lambda: fn(arrays)), (lambda: fn(foreign))
            for f in (cupy_fn, foreign_fn):
                for _ in range(4):  # first calls: compile, prepare
                    f()
            measure.synchronize()
            rounds = {"cupy": [], library: []}
            for _ in range(FOREIGN_ROUNDS):  # interleaved: the host's drift hits both alike
                for key, f in (("cupy", cupy_fn), (library, foreign_fn)):
                    rounds[key].append(measure.host_us(f, loops=args.loops, calls=args.calls)[0])
            measure.synchronize()
            row["host_us"] = statistics.median(rounds[library])
            row["cupy_host_us"] = statistics.median(rounds["cupy"])
            row["host_us_rounds"], row["cupy_host_us_rounds"] = rounds[library], rounds["cupy"]
            row["ratio"] = row["host_us"] / row["cupy_host_us"]
            row["meets_target"] = row["ratio"] <= FOREIGN_TARGET
            print(f"  {name:30s} {library:6s} {row['host_us']:7.1f} µs/call, CuPy arrays "
                  f"{row['cupy_host_us']:7.1f}: {row['ratio']:.2f}x", flush=True)
        except Exception as e:  # a library that cannot view this dtype (Numba: bfloat16)
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            measure.synchronize()
            print(f"  {name:30s} {library:6s} — ({row['error']})", flush=True)
        rows.append(row)
    return rows


def foreign_table(rows) -> str:
    lines = [f"{'op':30s} {'input':6s} {'µs':>7s} {'CuPy µs':>8s} {'ratio':>6s} "
             f"{f'<= {FOREIGN_TARGET}':>7s}"]
    for r in rows:
        if r["ratio"] is None:
            lines.append(f"{r['op']:30s} {r['input']:6s} {'—':>7s}")
            continue
        ok = "yes" if r["meets_target"] else "no"
        lines.append(f"{r['op']:30s} {r['input']:6s} {r['host_us']:7.1f} "
                     f"{r['cupy_host_us']:8.1f} {r['ratio']:6.2f} {ok:>7s}")
    return "\n".join(lines)


def measure_row(name, call, fn, graph_ms, args, peer=False) -> dict:
    fn()  # first call: compiles and prepares
    measure.synchronize()
    for _ in range(3):
        fn()
    measure.synchronize()
    host, samples = measure.host_us(fn, loops=args.loops, calls=args.calls)
    row = {"op": name, "call": call, "peer": peer, "host_us": host, "host_us_loops": samples,
           "meets_target": None if peer else meets_target(host), "graph_us": None,
           "graph_error": None}
    try:
        row["graph_us"] = 1e3 * graph_ms(lambda: [fn() for _ in range(GRAPH_CALLS)],
                                         per_graph=GRAPH_CALLS, repeat=args.loops)
    except Exception as e:  # a row that cannot be captured: say why, keep the others
        row["graph_error"] = f"{type(e).__name__}: {e}"[:300]
        measure.synchronize()
    print(f"  {name:36s} host {host:7.1f} µs/call  "
          + (f"graph {row['graph_us']:6.2f} µs/call" if row["graph_us"] is not None
             else f"graph — ({row['graph_error']})"), flush=True)
    return row


def table(rows) -> str:
    lines = [f"{'op':36s} {'host µs':>8s} {'<= 15 µs':>9s} {'graph µs':>9s}"]
    for r in rows:
        ok = {True: "yes", False: "no", None: "—"}[r["meets_target"]]
        graph = f"{r['graph_us']:9.2f}" if r["graph_us"] is not None else f"{'—':>9s}"
        lines.append(f"{r['op'] + (' (peer)' if r['peer'] else ''):36s} {r['host_us']:8.1f} "
                     f"{ok:>9s} {graph}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--loops", type=int, default=7, help="timed loops per row (median)")
    parser.add_argument("--calls", type=int, default=50, help="calls per timed loop")
    args = parser.parse_args(argv)

    facts = measure.device_facts()
    torch = measure.load_torch()
    facts.update(measure.torch_facts(torch))
    print(f"GPU {facts['gpu']}; cupy {facts['cupy']}; torch {facts['torch'] or 'absent'}; "
          f"commit {git_commit()}", flush=True)
    calls, (x, w) = cupyconv_calls()
    rows = [measure_row(name, call, fn, measure.cupy_graph_ms, args)
            for name, call, fn in calls]
    if torch is not None:
        import torch.nn.functional as F

        measure.set_cudnn_tf32(torch, False)
        xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
        rows.append(measure_row(
            "torch F.conv2d 3x3 NCHW", "torch.nn.functional.conv2d(x, w, padding=1)",
            lambda: F.conv2d(xt, wt, padding=1),
            lambda body, **kw: measure.torch_graph_ms(torch, body, **kw), args, peer=True))
    views = foreign_views(torch)
    print(f"\nforeign arrays ({', '.join(views) or 'no library present'}) vs CuPy arrays:",
          flush=True)
    foreign = [r for name, call, fn, arrays in foreign_calls()
               for r in measure_foreign_row(name, call, fn, arrays, views, args)]
    print("\n" + table(rows))
    if foreign:
        print("\n" + foreign_table(foreign))
    ours = [r for r in rows if not r["peer"]]
    measured = [r for r in foreign if r["ratio"] is not None]
    result = {"benchmark": "host", **facts, "python": platform.python_version(),
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "target_us": TARGET_US, "loops": args.loops, "calls": args.calls,
              "graph_calls": GRAPH_CALLS, "rows": rows,
              "foreign": {"target_ratio": FOREIGN_TARGET, "rows": foreign,
                          "meeting_target": sum(bool(r["meets_target"]) for r in measured),
                          "measured": len(measured),
                          "max_ratio": max((r["ratio"] for r in measured), default=None)},
              "summary": {"meeting_target": sum(bool(r["meets_target"]) for r in ours),
                          "rows": len(ours),
                          "median_host_us": statistics.median(r["host_us"] for r in ours)}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"host-{facts['gpu'].replace(' ', '_')}-{git_commit()}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"\n{result['summary']['meeting_target']} of {len(ours)} cupyconv rows meet "
          f"{TARGET_US:.0f} µs; {result['foreign']['meeting_target']} of {len(measured)} foreign "
          f"rows are within {FOREIGN_TARGET}x of CuPy arrays; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
