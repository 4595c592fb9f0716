"""Channels-last depthwise: device time of each channels-per-thread width (VEC) and runs-per-thread
cap (MAX_ROUNDS) on every depthwise layer of MobileNetV2 and EfficientNet-B0 (batch 32), so the
plan's choice can be set from measurements (issue 17 item 1).

    python3 benchmarks/exp_depthwise_cl.py [--dtypes float16,float32] [--out DIR]

Prints one line per (layer, dtype, pass): ms for each (vec, rounds) setting, the fastest marked.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import measure  # noqa: E402
from bench_depthwise_nets import BATCH, bench_layers, geometry, our_calls, peer_calls  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._core.dtypes import itemsize  # noqa: E402
from cupyconv._depthwise import channels_last  # noqa: E402

PASSES = ("forward", "backward-data", "backward-weight")


def settings(dtype: str):
    """(vec, max_rounds) pairs to time: every instantiated width but 1, two round caps."""
    vecs = [v for v in channels_last.DEPTHWISE_CL_VECS[dtype] if v > 1]
    return [(v, r) for v in vecs for r in (1, 4)]


def depthwise_operands(torch, dtypes, l2_bytes: int, layout: str = "NHWC",
                       keep=lambda layer: True):
    """For each depthwise layer of the networks that ``keep`` accepts and each of ``dtypes``:
    (entry, dtype, geometry, bytes moved, PyTorch operand copies in ``layout`` rotated past the
    L2, their CuPy views)."""
    nhwc = layout == "NHWC"
    for entry in [e for e in bench_layers() if e.family == "depthwise" and keep(e.layer)]:
        layer = entry.layer
        for dtype in dtypes:
            geom = geometry(layer, dtype, layout)
            nbytes = geom.bytes_moved(itemsize(dtype))
            copies = measure.rotation_copies(l2_bytes, nbytes, cap=32)
            shapes = (layer.input_shape(BATCH), layer.weight_shape(), layer.output_shape(BATCH))
            tensors = measure.torch_operand_copies(torch, shapes, dtype, nhwc, copies,
                                                   seed=zlib.crc32(entry.label.encode()))
            arrays = [tuple(measure.cupy_view(t, nhwc) for t in ops) for ops in tensors]
            yield entry, dtype, geom, nbytes, tensors, arrays


def compiled_settings_sweep(doc: str, settings, compile_setting, argv=None):
    """Start of a sweep over compile-time settings (exp_depthwise_walk, exp_depthwise_wgrad_cl):
    the options (--dtypes, --settings: names of ``settings``, --out), each setting's modules
    compiled first in parallel processes (``compile_setting(name, dtypes=...)`` -> a line to
    print; CuPy's disk cache keeps them), then PyTorch with cuDNN autotuning.  Returns (args,
    dtypes, names, torch, PyTorch's graph timer, L2 bytes)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--settings", default=",".join(settings))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dtypes, names = tuple(args.dtypes.split(",")), args.settings.split(",")
    with multiprocessing.get_context("spawn").Pool(len(names)) as pool:
        for line in pool.map(functools.partial(compile_setting, dtypes=dtypes), names):
            print(line, flush=True)
    torch = measure.load_torch()
    torch.backends.cudnn.benchmark = True
    torch_graph_ms = functools.partial(measure.torch_graph_ms, torch)
    return args, dtypes, names, torch, torch_graph_ms, measure.device_facts()["l2_bytes"]


def time_settings(torch, torch_graph_ms, operands, passes, names, use) -> list[dict]:
    """The sweep of the settings scripts: for each (layer, dtype) of ``operands``
    (:func:`depthwise_operands`) and each of ``passes``, PyTorch's device time and ours under each
    setting of ``names`` (``use(name)`` switches to it), one printed line per row; the rows
    (layer, dtype, pass, bytes, ms per setting and "torch", best)."""
    rows = []
    for entry, dtype, geom, nbytes, tensors, arrays in operands:
        for name in passes:
            ours = our_calls(entry.layer, geom)[name]
            peer = peer_calls(torch, entry.layer)[name]
            peer(tensors[0])
            times = {"torch": measure.rotated_graph_ms(peer, tensors, torch_graph_ms, repeat=3,
                                                       target_ms=5.0)}
            for setting in names:
                use(setting)
                times[setting] = measure.rotated_graph_ms(ours, arrays, measure.cupy_graph_ms,
                                                          repeat=3, target_ms=5.0)
            best = min((k for k in times if k != "torch"), key=times.get)
            rows.append({"layer": entry.label, "dtype": dtype, "pass": name, "bytes": nbytes,
                         "ms": times, "best": best})
            print(f"{entry.label:22s} {dtype:8s} {name:15s} torch {times['torch']:.4f} | "
                  + "  ".join(f"{k} {times['torch'] / v:.2f}x{'*' if k == best else ' '}"
                              for k, v in times.items() if k != "torch"), flush=True)
        del tensors, arrays
        measure.release_memory(torch)
    return rows


def print_geomeans(rows: list[dict], passes, names, dtypes) -> None:
    """Geomean and min of PyTorch time / ours per (pass, setting, dtype) of :func:`time_settings`'
    rows."""
    for name in passes:
        for setting in names:
            for dtype in dtypes:
                ratios = [r["ms"]["torch"] / r["ms"][setting] for r in rows
                          if r["dtype"] == dtype and r["pass"] == name]
                print(f"{name:15s} {setting:8s} {dtype:8s} geomean "
                      f"{measure.geomean(ratios):.2f}x min {min(ratios):.2f}x", flush=True)


def use(dtype: str, vec: int, rounds: int) -> None:
    channels_last.DEPTHWISE_CL_VECS[dtype] = (vec, 1)
    channels_last.MAX_ROUNDS = rounds
    clear_caches()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch = measure.load_torch()
    l2 = measure.device_facts()["l2_bytes"]
    original = dict(channels_last.DEPTHWISE_CL_VECS), channels_last.MAX_ROUNDS
    rows = []
    for entry, dtype, geom, nbytes, _, arrays in depthwise_operands(
            torch, args.dtypes.split(","), l2):
        layer = entry.layer
        calls = our_calls(layer, geom)
        for name in PASSES:
            times = {}
            for vec, rounds in settings(dtype):
                use(dtype, vec, rounds)
                times[f"v{vec}r{rounds}"] = measure.rotated_graph_ms(
                    calls[name], arrays, measure.cupy_graph_ms, repeat=3, target_ms=5.0)
            best = min(times, key=times.get)
            rows.append({"layer": entry.label, "dtype": dtype, "pass": name,
                         "bytes": nbytes, "ms": times, "best": best})
            print(f"{entry.label:26s} {dtype:8s} {name:16s} "
                  + "  ".join(f"{k} {v:.4f}{'*' if k == best else ' '}"
                              for k, v in times.items()), flush=True)
        channels_last.DEPTHWISE_CL_VECS.update(original[0])
        channels_last.MAX_ROUNDS = original[1]
        clear_caches()
    if args.out:
        Path(args.out, "exp-depthwise-cl.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
