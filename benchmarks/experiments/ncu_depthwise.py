"""Issue 48: profile depthwise (and grouped) layers under Nsight Compute, ours beside PyTorch's.

    ncu --profile-from-start off --csv --page details --section SpeedOfLight ... \
        python3 benchmarks/experiments/ncu_depthwise.py --side ours  [--case SPEC ...]
        [--from-json depthwise-nets-*.json --worst 6]

A case is ``"<layer label>|<dtype>|<layout>|<pass>"`` with the layer label of
``bench_depthwise_nets.py`` (``"dw 3x3 s1 960ch 7^2|float16|NHWC|backward-weight"``);
``--worst N`` adds the N depthwise cells of a bench_depthwise_nets JSON with the lowest ratio
(PyTorch / ours).  Each case runs its pass three times unprofiled (compiles, plans, autotunes
cuDNN), then once between ``cudaProfilerStart`` / ``cudaProfilerStop``, so that ncu profiles only
the kernels of that one call.  The cases' order is printed (``CASE i: ...``): the CSV's
kernels follow it, both sides in the same order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_depthwise_nets as bench  # noqa: E402
import measure  # noqa: E402


def worst_cases(path: str, count: int) -> list[str]:
    """The ``count`` depthwise (layer, dtype, layout, pass) cells of a bench JSON with the
    lowest ratio."""
    rows = json.loads(Path(path).read_text())["rows"]
    cells = [(p["ratio"], f"{r['layer']}|{r['dtype']}|{r['layout']}|{name}")
             for r in rows if r["family"] == "depthwise"
             for name, p in r["passes"].items() if p.get("ratio")]
    return [case for _, case in sorted(cells)[:count]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("ours", "torch"), required=True)
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--from-json")
    parser.add_argument("--worst", type=int, default=0)
    args = parser.parse_args(argv)
    cases = list(args.case)
    if args.from_json and args.worst:
        cases += [c for c in worst_cases(args.from_json, args.worst) if c not in cases]
    torch = measure.load_torch()
    import cupy

    by_label = {entry.label: entry for entry in bench.bench_layers()}
    for i, case in enumerate(cases):
        label, dtype, layout, pass_name = case.split("|")
        layer = by_label[label].layer
        nhwc = layout == "NHWC"
        geom = bench.geometry(layer, dtype, layout)
        shapes = (layer.input_shape(bench.BATCH), layer.weight_shape(),
                  layer.output_shape(bench.BATCH))
        tensors = measure.torch_operand_copies(torch, shapes, dtype, nhwc, 1, seed=i)
        if args.side == "ours":
            ops = tuple(measure.cupy_view(t, nhwc) for t in tensors[0])
            call = bench.our_calls(layer, geom)[pass_name]
            sync = cupy.cuda.Device().synchronize
        else:
            ops = tensors[0]
            call = bench.peer_calls(torch, layer)[pass_name]
            sync = torch.cuda.synchronize
        for _ in range(3):
            call(ops)
        sync()
        print(f"CASE {i}: {case}", flush=True)
        cupy.cuda.profiler.start()
        call(ops)
        sync()
        cupy.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
