"""Where the time of a cupyconv.dask filter graph goes (one GPU): the filter on one halo'd chunk
(cupyconv vs cupyx), the whole graph under the synchronous and threaded schedulers, and a
cProfile of the synchronous run.  Exploration for bench_dask; prints only."""

import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402
import cupyx.scipy.ndimage as cx  # noqa: E402
import dask_image.ndfilters as dif  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
import cupyconv.ndimage as cn  # noqa: E402
from bench_dask import discard, random_volume  # noqa: E402


def timed(fn, n=20):
    fn()
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t) / n


size = int(sys.argv[1]) if len(sys.argv) > 1 else 512
chunk = int(sys.argv[2]) if len(sys.argv) > 2 else 128
block = cupy.random.rand(chunk + 16, chunk + 16, chunk + 16, dtype=cupy.float32)
whole = cupy.random.rand(size, size, size, dtype=cupy.float32)
for name, fn in [("cupyconv", cn.gaussian_filter), ("cupyx", cx.gaussian_filter)]:
    print(f"{name} gaussian one {chunk + 16}^3 block: {timed(lambda: fn(block, 2.0)) * 1e3:.3f} ms;"
          f" whole {size}^3: {timed(lambda: fn(whole, 2.0), 5) * 1e3:.2f} ms "
          f"({8 * whole.size / timed(lambda: fn(whole, 2.0), 5) / 1e9:.1f} GB/s)")
del whole
vol = random_volume(size, chunk, cupy)
graphs = {"cupyconv": cd.gaussian_filter(vol, 2.0), "dask-image": dif.gaussian_filter(vol, 2.0),
          "generation": vol}
for sched, workers in [("synchronous", 1), ("threads", 4), ("threads", 8), ("threads", 16)]:
    for name, g in graphs.items():
        d = discard(g)
        d.compute(scheduler=sched, num_workers=workers)
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        d.compute(scheduler=sched, num_workers=workers)
        cupy.cuda.Device().synchronize()
        print(f"{sched} x{workers} {name}: {time.perf_counter() - t:.3f} s")
for name in ("cupyconv", "dask-image"):
    d = discard(graphs[name])
    prof = cProfile.Profile()
    prof.enable()
    d.compute(scheduler="synchronous")
    cupy.cuda.Device().synchronize()
    prof.disable()
    print(f"---- profile {name}")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(28)
