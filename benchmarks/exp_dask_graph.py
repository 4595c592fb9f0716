"""The scheduler-side cost of cupyconv.dask's filter graph on a CPU (NumPy chunks, scipy.ndimage
backend; no GPU needed): one task per output chunk (cupyconv.dask, ``_halo_map``) against
``dask.array.map_overlap`` (the route cupyconv.dask took before, and dask-image's) on the same
lazily generated float32 volume, chunks and scheduler.  Prints, per graph: tasks in the filtered
array's graph, the time to build it (the call plus materialising the graph), and the best
``compute()`` time under the synchronous and threaded schedulers, less the generation-only
graph (each output chunk is reduced to one element in the graph, as in bench_dask.py).

``--op gaussian`` runs scipy's gaussian (sigma ``--sigma``) in every chunk; ``--op copy`` runs a
block function that returns its block, so what is left is the graph: ordering, halo assembly,
trimming and the scheduler.

    python3 benchmarks/exp_dask_graph.py [--size 256] [--chunk 32] [--op gaussian,copy]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
import scipy.ndimage as sn  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
from cupyconv.dask.graph import _halo_map  # noqa: E402
from bench_dask import discard, random_volume  # noqa: E402


def copy_block(block, **_):
    """The cheapest block function: the block itself (trimmed by the graph)."""
    return block


def graphs(volume, op: str, sigma: float) -> dict:
    """name -> a function building the filtered lazy volume."""
    radius = int(4.0 * sigma + 0.5)  # scipy's truncate=4
    depth = {ax: radius for ax in range(volume.ndim)}
    meta = np.empty((0,) * volume.ndim, np.float32)
    if op == "gaussian":
        fn = functools.partial(sn.gaussian_filter, sigma=sigma, mode="reflect")
        built = {"cupyconv.dask (one task per chunk)": lambda: cd.gaussian_filter(volume, sigma)}
        try:
            import dask_image.ndfilters as dif

            built["dask-image (map_overlap)"] = lambda: dif.gaussian_filter(volume, sigma)
        except ImportError:
            pass
    else:
        fn = copy_block
        reach = {ax: (radius, radius) for ax in range(volume.ndim)}
        built = {"one task per chunk (_halo_map)": lambda: _halo_map(
            volume, reach, {}, fn, np.float32, meta, label="copy")}
    # the old route of cupyconv.dask, kept here only for this comparison
    built["map_overlap (old route)"] = lambda: da.map_overlap(
        fn, volume, depth=depth, boundary="none", trim=True, allow_rechunk=False,
        dtype=np.float32, meta=meta)
    return built


def best(fn, repeat: int) -> float:
    fn()  # warm-up: imports, first-touch allocations
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--chunk", type=int, default=32)
    p.add_argument("--sigma", type=float, default=2.0)
    p.add_argument("--op", default="gaussian,copy")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    volume = random_volume(args.size, args.chunk, np)
    print(f"dask {dask.__version__}; float32 {args.size}^3 in {args.chunk}^3 chunks "
          f"({volume.npartitions} chunks, {len(dict(volume.__dask_graph__()))} generation tasks);"
          f" best of {args.repeat}; threads x{args.threads}")
    sched = {"synchronous": dict(scheduler="synchronous"),
             "threads": dict(scheduler="threads", num_workers=args.threads)}
    base = {s: best(lambda: discard(volume).compute(**kw), args.repeat) for s, kw in sched.items()}
    print("generation only: " + ", ".join(f"{s} {t:.3f} s" for s, t in base.items()))
    for op in args.op.split(","):
        print(f"---- {op}")
        for name, build in graphs(volume, op, args.sigma).items():
            t = time.perf_counter()
            lazy = build()
            tasks = len(dict(lazy.__dask_graph__()))
            build_s = time.perf_counter() - t
            net = {s: best(lambda: discard(lazy).compute(**kw), args.repeat) - base[s]
                   for s, kw in sched.items()}
            print(f"{name:38s} tasks {tasks:6d}  build {build_s * 1e3:7.1f} ms  "
                  + "  ".join(f"{s} {v:.3f} s" for s, v in net.items()))


if __name__ == "__main__":
    main()
