"""cupyconv.dask against dask-image on one GPU, the same chunks and scheduler (issue 19).

    python3 benchmarks/bench_dask.py [--size 512] [--chunk 128] [--ops gaussian_filter,correlate]
        [--scheduler threads] [--workers 4] [--repeat 3] [--host-size 0] [--images 10000]
        [--image-chunk 128] [--layers all] [--out DIR]

Problems: a float32 volume of ``--size``^3 (default 512^3, 512 MiB), generated chunk by chunk on
the GPU (each ``--chunk``^3 chunk from its own seeded ``cupy.random`` generator, so the volume is
never held whole), filtered with ``gaussian_filter`` sigma 2 and a dense 7^3 ``correlate`` (random
weights in [-1, 1)), mode "reflect", by ``cupyconv.dask`` and by ``dask_image.ndfilters`` (which
sends CuPy chunks to ``cupyx.scipy.ndimage``).  Each output chunk is reduced to one element in
the graph, so nothing but the chunks in flight occupies the GPU.

Timing: wall time of ``compute()`` of the whole graph (generation, halo exchange, filter,
discard), best of ``--repeat`` after one warm-up run, minus the best time of the generation-only
graph ("net").  Throughput GB/s = (input read + output written, 2 x 4 bytes per voxel) / net
time.  Ratio = dask-image net time / ours (> 1: cupyconv faster).  Agreement: max |ours -
dask-image| / max |dask-image| over the first chunk's region, flagged above ``TOLERANCE``.

In-memory rate: the same filter by ``cupyconv.ndimage`` (and ``cupyx``) in one call on a resident
``--size``^3 volume where it fits in GPU memory; "streamed / in-memory" is the dask graph's rate
over that one-call rate.  The streamed case: ``--size 2048 --chunk 256`` (32 GiB in, 32 GiB out):
the graph streams chunks, a wavefront of them resident at once; expect minutes per run, so use
``--repeat 1``.

Host out-of-core (``--host-size S``, 0: skip): an S x 1024 x 1024 float32 volume in host memory
(NumPy chunks of ``--chunk`` along the first axis and 256 x 256 across, filled once), filtered by
``cupyconv.dask.gaussian_filter(..., gpu=True)`` (each chunk with its halo copied to the GPU and
back) into a NumPy result through ``da.store``: GB/s including the PCIe copies.

Batched convolution (``--images N``, 0: skip): the ResNet-50 layers of ``bench_precision`` over a
dask array of N float32 NCHW images (batch chunks of ``--image-chunk``, each generated on the
GPU), ``cupyconv.dask.conv`` under the same scheduler; images/s net of generation, against a
plain Python loop over the same chunks calling ``cupyconv.conv`` (dask's efficiency) and, where
PyTorch is installed, the same loop through ``torch.nn.functional.conv2d`` (cuDNN at PyTorch's
defaults: TF32 math for float32, no autotuning; cupyconv computes exact float32).

Writes ``dask-<size>-<gpu>-<commit>.json`` and ``.md`` into ``--out`` (progress on stderr, the
table on stdout).  Needs dask[array] and dask-image: without them it says so and exits with 2.
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

from bench_depthwise_nets import progress, results_stem, split_choices, write_results  # noqa: E402

DTYPE = "float32"
OPS = ("gaussian_filter", "correlate")
SIGMA = 2.0
KERNEL = 7             # the dense correlate's size per axis
TOLERANCE = 1e-4       # max relative difference of two float32 results still called agreement
LIBS = ("cupyconv", "dask-image")
HOST_CHUNK_EDGE = 256  # the host volume's chunks across its 1024 x 1024 planes


class Problem(NamedTuple):
    """One filter of the ``size``^3 volume in ``chunk``^3 chunks."""

    op: str
    size: int
    chunk: int

    @property
    def label(self) -> str:
        what = f"sigma={SIGMA:g}" if self.op == "gaussian_filter" else f"k={KERNEL}"
        return f"{self.size}^3 {self.op} {what} chunks {self.chunk}^3"

    @property
    def halo(self) -> int:
        """Elements of halo each chunk needs per side (the Gaussian's radius, truncate 4)."""
        return int(4.0 * SIGMA + 0.5) if self.op == "gaussian_filter" else KERNEL // 2

    @property
    def nbytes(self) -> int:
        """Bytes a perfect pass moves: the input read once, the output written once."""
        return 2 * 4 * self.size ** 3


def problems(ops=OPS, size: int = 512, chunk: int = 128) -> list[Problem]:
    return [Problem(op, size, chunk) for op in OPS if op in ops]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--size", type=int, default=512, help="edge of the cubic volume (512)")
    parser.add_argument("--chunk", type=int, default=128, help="edge of a cubic chunk (128)")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--scheduler", choices=("threads", "synchronous"), default="threads")
    parser.add_argument("--workers", type=int, default=4, help="threads of the threaded scheduler")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per graph (3)")
    parser.add_argument("--host-size", type=int, default=0,
                        help="first axis of the host out-of-core volume (x 1024 x 1024; 0: skip)")
    parser.add_argument("--images", type=int, default=10000,
                        help="images of the batched ResNet-50 convolutions (0: skip)")
    parser.add_argument("--image-chunk", type=int, default=128, help="images per batch chunk")
    parser.add_argument("--layers", default="all", help="comma list of ResNet-50 layers or 'all'")
    args = parser.parse_args(argv)
    args.quick = False  # (read by split_choices; --repeat has its own default here)
    split_choices(parser, args, {"ops": OPS})
    if args.size < 1 or args.chunk < 1 or args.workers < 1 or args.image_chunk < 1:
        parser.error("--size, --chunk, --workers and --image-chunk must be at least 1")
    if args.host_size < 0 or args.images < 0:
        parser.error("--host-size and --images must be 0 (skip) or more")
    args.layers = conv_layers(args.layers, parser)
    if args.chunk > args.size:
        args.chunk = args.size
    return args


def block_seed(label: str, location) -> int:
    """The seed of one chunk's generator: the same chunk gets the same values in every graph."""
    return zlib.crc32(f"{label}:{tuple(int(i) for i in location)}".encode())


def dense_weights():
    """The 7^3 float32 weights of the correlate problem, uniform in [-1, 1)."""
    import numpy as np

    rng = np.random.default_rng(zlib.crc32(b"bench_dask correlate"))
    return rng.uniform(-1, 1, (KERNEL,) * 3).astype(np.float32)


def random_volume(size: int, chunk: int, xp):
    """A lazy float32 ``size``^3 volume, each chunk drawn from ``xp.random`` (``cupy`` on the
    GPU; ``numpy`` in the CPU test) seeded by :func:`block_seed` of its position."""
    import dask.array as da

    def draw(block_info=None):
        info = block_info[None]
        rs = xp.random.RandomState(block_seed("volume", info["chunk-location"]))
        return rs.uniform(-1, 1, info["chunk-shape"]).astype(xp.float32)

    chunks = da.core.normalize_chunks(chunk, (size,) * 3)
    return da.map_blocks(draw, chunks=chunks, dtype=DTYPE,
                         meta=xp.empty((0, 0, 0), dtype=xp.float32))


def discard(out, to_host: bool = False):
    """``out`` with each chunk reduced to a copy of its first element: computing it runs every
    chunk and keeps none (a view would keep the whole chunk alive).  ``to_host``: the copy goes
    to host memory (CuPy chunks), which waits for the chunk's kernels, so a task's compute time
    then includes its GPU time."""
    first = (slice(0, 1),) * out.ndim
    chunks = tuple((1,) * len(c) for c in out.chunks)
    if to_host:
        import numpy

        return out.map_blocks(lambda b: b[first].get(), chunks=chunks, dtype=out.dtype,
                              meta=numpy.empty((0,) * out.ndim, out.dtype))
    return out.map_blocks(lambda b: b[first].copy(), chunks=chunks, dtype=out.dtype)


def graphs(problem: Problem, volume):
    """lib -> the lazy filtered volume."""
    import cupy
    import dask_image.ndfilters as dif

    import cupyconv.dask as cd

    if problem.op == "gaussian_filter":
        return {"cupyconv": cd.gaussian_filter(volume, SIGMA),
                "dask-image": dif.gaussian_filter(volume, SIGMA)}
    w = dense_weights()
    return {"cupyconv": cd.correlate(volume, w),
            "dask-image": dif.correlate(volume, cupy.asarray(w))}


def require_libraries(modules=("dask.array", "dask_image.ndfilters")) -> None:
    """Exit with status 2 and one line on stderr where dask or dask-image is missing."""
    import importlib

    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name.split(".")[0].replace("_", "-"))
    if missing:
        print(f"bench_dask needs {' and '.join(missing)}: pip install 'dask[array]' dask-image",
              file=sys.stderr)
        sys.exit(2)


# ------------------------------------------------------------------------------------ GPU part
def best_seconds(lazy, args) -> float:
    """Best wall seconds of ``compute()`` over ``args.repeat`` runs after one warm-up."""
    import cupy

    times = []
    for i in range(args.repeat + 1):
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        lazy.compute(scheduler=args.scheduler, num_workers=args.workers)
        cupy.cuda.Device().synchronize()
        if i:  # the first run compiles kernels and warms the pools
            times.append(time.perf_counter() - t)
        cupy.get_default_memory_pool().free_all_blocks()
    return min(times)


def max_rel_diff(out, ref) -> float:
    import numpy as np

    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return float("inf")
    scale = float(np.abs(ref).max())
    return float(np.abs(out - ref).max()) / (scale if scale > 0 else 1.0)


def row_of(problem: Problem, seconds: dict, generation_s: float, err: float) -> dict:
    """One table row from the best times (lib -> seconds) and the generation-only time."""
    net = {lib: max(s - generation_s, 1e-9) for lib, s in seconds.items()}
    return {"problem": problem.label, "op": problem.op, "size": problem.size,
            "chunk": problem.chunk, "halo": problem.halo, "bytes": problem.nbytes,
            "generation_s": generation_s,
            **{f"{lib}_s": seconds[lib] for lib in LIBS},
            **{f"{lib}_net_s": net[lib] for lib in LIBS},
            **{f"{lib}_GBps": problem.nbytes / net[lib] / 1e9 for lib in LIBS},
            "ratio": net["dask-image"] / net["cupyconv"], "err": err, "ok": err <= TOLERANCE}


def measure_problem(problem: Problem, args) -> dict:
    import cupy

    volume = random_volume(problem.size, problem.chunk, cupy)
    lazy = graphs(problem, volume)
    corner = tuple(slice(0, problem.chunk) for _ in range(3))
    err = max_rel_diff(cupy.asnumpy(lazy["cupyconv"][corner].compute(scheduler="synchronous")),
                       cupy.asnumpy(lazy["dask-image"][corner].compute(scheduler="synchronous")))
    generation = best_seconds(discard(volume), args)
    seconds = {lib: best_seconds(discard(lazy[lib]), args) for lib in LIBS}
    row = row_of(problem, seconds, generation, err)
    rates = in_memory_rates(problem)
    row["in_memory_GBps"] = rates
    row["streamed_fraction"] = (row["cupyconv_GBps"] / rates["cupyconv"]) if rates else None
    return row


def in_memory_rates(problem: Problem) -> dict:
    """GB/s of one call of the filter on a resident ``size``^3 volume (cupyconv.ndimage and
    cupyx), or {} where input, output and a temporary would not fit in free GPU memory."""
    import cupy
    import cupyx.scipy.ndimage as cx

    import cupyconv.ndimage as cn

    free = cupy.cuda.Device().mem_info[0]
    if 3 * problem.size ** 3 * 4 > 0.8 * free:
        return {}
    vol = cupy.random.default_rng(1).random((problem.size,) * 3, dtype=cupy.float32)
    rates = {}
    for lib, mod in (("cupyconv", cn), ("cupyx", cx)):
        if problem.op == "gaussian_filter":
            call = lambda: mod.gaussian_filter(vol, SIGMA)  # noqa: E731
        else:
            w = cupy.asarray(dense_weights())
            call = lambda: mod.correlate(vol, w)  # noqa: E731
        call()
        times = []
        for _ in range(3):
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            call()
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t)
        rates[lib] = problem.nbytes / min(times) / 1e9
    del vol
    cupy.get_default_memory_pool().free_all_blocks()
    return rates


def host_out_of_core(size: int, chunk: int, args) -> dict:
    """The host volume filtered with gpu=True into a NumPy result: seconds and GB/s."""
    import cupy
    import dask.array as da
    import numpy as np

    import cupyconv.dask as cd

    shape = (size, 1024, 1024)
    src = np.empty(shape, np.float32)
    rng = np.random.default_rng(5)
    for z in range(0, size, 64):
        src[z:z + 64] = rng.random((min(64, size - z),) + shape[1:], dtype=np.float32)
    dst = np.empty_like(src)
    chunks = (chunk, HOST_CHUNK_EDGE, HOST_CHUNK_EDGE)
    graph = cd.gaussian_filter(da.from_array(src, chunks=chunks), SIGMA, gpu=True)
    times = []
    for i in range(args.repeat + 1):
        t = time.perf_counter()
        da.store(graph, dst, scheduler=args.scheduler, num_workers=args.workers, lock=False)
        cupy.cuda.Device().synchronize()
        if i:
            times.append(time.perf_counter() - t)
    nbytes = 8 * src.size
    return {"shape": list(shape), "chunks": list(chunks), "s": min(times),
            "GBps": nbytes / min(times) / 1e9}


# --------------------------------------------------------------------------- batched conv
def conv_layers(names: str, parser=None) -> list[str]:
    """The ResNet-50 layers (names of bench.SUITE) of ``names``: 'all' or a comma list."""
    from bench_precision import LAYERS

    if names == "all":
        return list(LAYERS)
    chosen = [n for n in names.split(",") if n]
    unknown = [n for n in chosen if n not in LAYERS]
    if unknown or not chosen:
        message = f"--layers: unknown {unknown}; choose from {', '.join(LAYERS)} or 'all'"
        if parser is None:
            raise ValueError(message)
        parser.error(message)
    return chosen


def conv_problem(layer: str):
    """(input shape of one image (C, H, W), weight shape, conv options) of a SUITE layer."""
    from bench import SUITE

    _, c, h, w, k, ker, stride, pad, dil, groups = SUITE[layer]
    return (c, h, w), (k, c // groups, ker, ker), dict(stride=stride, padding=pad, dilation=dil,
                                                      groups=groups)


def random_images(images: int, chunk: int, image_shape):
    """A lazy float32 (images, *image_shape) batch, each chunk drawn on the GPU."""
    import cupy
    import dask.array as da

    def draw(block_info=None):
        info = block_info[None]
        rs = cupy.random.RandomState(block_seed("images", info["chunk-location"]))
        return rs.uniform(-1, 1, info["chunk-shape"]).astype(cupy.float32)

    chunks = da.core.normalize_chunks((chunk,) + tuple(image_shape), (images,) + image_shape)
    return da.map_blocks(draw, chunks=chunks, dtype=DTYPE,
                         meta=cupy.empty((0,) * (1 + len(image_shape)), dtype=cupy.float32))


def measure_conv_layer(layer: str, args) -> dict:
    """Images/s of one layer over ``args.images`` images: cupyconv.dask, a plain cupyconv loop,
    and a PyTorch loop (where installed); each net of its own generation time."""
    import cupy

    import cupyconv
    import cupyconv.dask as cd

    image, wshape, opts = conv_problem(layer)
    w = cupy.random.default_rng(2).uniform(-1, 1, wshape, dtype=cupy.float32)
    batch = random_images(args.images, args.image_chunk, image)
    seconds = {"generation": best_seconds(discard(batch), args),
               "cupyconv.dask": best_seconds(discard(cd.conv(batch, w, **opts)), args)}
    sizes = batch.chunks[0]

    def loop(fn):
        out = None
        for i, n in enumerate(sizes):
            rs = cupy.random.RandomState(block_seed("images", (i, 0, 0, 0)))
            x = rs.uniform(-1, 1, (n,) + image).astype(cupy.float32)
            if fn is not None:
                out = fn(x)
        return out

    def timed_loop(fn):
        times = []
        for i in range(args.repeat + 1):
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            loop(fn)
            cupy.cuda.Device().synchronize()
            if i:
                times.append(time.perf_counter() - t)
        return min(times)

    loop_generation = timed_loop(None)
    seconds["cupyconv loop"] = timed_loop(lambda x: cupyconv.conv(x, w, **opts))
    try:
        import torch
        import torch.nn.functional as F

        tw = torch.as_tensor(w, device="cuda")
        seconds["torch loop"] = timed_loop(lambda x: F.conv2d(torch.as_tensor(x, device="cuda"),
                                                               tw, **opts))
    except ImportError:
        pass
    net = {lib: max(s - (seconds["generation"] if lib == "cupyconv.dask" else loop_generation),
                    1e-9) for lib, s in seconds.items() if lib != "generation"}
    return {"layer": layer, "images": args.images, "chunk": args.image_chunk,
            "generation_s": seconds["generation"], "loop_generation_s": loop_generation,
            **{f"{lib}_s": s for lib, s in seconds.items() if lib != "generation"},
            **{f"{lib}_img_per_s": args.images / t for lib, t in net.items()},
            "dask_efficiency": net["cupyconv loop"] / net["cupyconv.dask"]}


# --------------------------------------------------------------------------- report
def markdown(result: dict) -> str:
    s = result["settings"]
    lines = [
        f"GPU {result['gpu']}, commit {result['commit']}, {result['date']}; CuPy "
        f"{result['cupy']}, Dask {result['dask']}, dask-image {result['dask_image']}.  float32 "
        f"{s['size']}^3 in {s['chunk']}^3 chunks generated on the GPU, mode reflect, "
        f"{s['scheduler']} scheduler ({s['workers']} workers), best of {s['repeat']}.  Net = "
        "time minus the generation-only graph; GB/s = 8 bytes per voxel / net; x = dask-image "
        "net / cupyconv net (> 1: cupyconv faster).", "",
        "| problem | halo | generation s | cupyconv s (net) | dask-image s (net) | cupyconv GB/s "
        "| dask-image GB/s | x | max rel |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        err = f"{r['err']:.1e}" + ("" if r["ok"] else " **MISMATCH**")
        lines.append(
            f"| {r['problem']} | {r['halo']} | {r['generation_s']:.3f} | {r['cupyconv_s']:.3f} "
            f"({r['cupyconv_net_s']:.3f}) | {r['dask-image_s']:.3f} ({r['dask-image_net_s']:.3f})"
            f" | {r['cupyconv_GBps']:.1f} | {r['dask-image_GBps']:.1f} | {r['ratio']:.2f}x | "
            f"{err} |")
    lines += ["", "In memory: one call on the resident volume (GB/s); streamed / in-memory: the "
              "cupyconv.dask rate above over cupyconv's one-call rate.", "",
              "| problem | cupyconv one call GB/s | cupyx one call GB/s | streamed / in-memory |",
              "|---|---|---|---|"]
    for r in result["rows"]:
        m = r.get("in_memory_GBps") or {}
        frac = r.get("streamed_fraction")
        lines.append(f"| {r['problem']} | {m.get('cupyconv', float('nan')):.1f} | "
                     f"{m.get('cupyx', float('nan')):.1f} | "
                     + (f"{frac:.1%} |" if frac is not None else "does not fit |"))
    host = result.get("host_out_of_core")
    if host:
        lines += ["", f"Host out-of-core (gpu=True): float32 {host['shape']} in host memory, "
                  f"chunks {host['chunks']}, gaussian sigma {SIGMA:g} into a NumPy result: "
                  f"{host['s']:.2f} s, {host['GBps']:.1f} GB/s (PCIe copies included)."]
    conv = result.get("conv_rows") or []
    if conv:
        has_torch = any("torch loop_img_per_s" in r for r in conv)
        lines += ["", f"Batched convolution: {conv[0]['images']} float32 NCHW images in batch "
                  f"chunks of {conv[0]['chunk']} generated on the GPU, images/s net of "
                  "generation; efficiency = plain cupyconv loop time / cupyconv.dask time.", "",
                  "| layer | cupyconv.dask img/s | cupyconv loop img/s | efficiency |"
                  + (" torch loop img/s |" if has_torch else ""),
                  "|---|---|---|---|" + ("---|" if has_torch else "")]
        for r in conv:
            line = (f"| {r['layer']} | {r['cupyconv.dask_img_per_s']:.0f} | "
                    f"{r['cupyconv loop_img_per_s']:.0f} | {r['dask_efficiency']:.0%} |")
            if has_torch:
                line += f" {r.get('torch loop_img_per_s', float('nan')):.0f} |"
            lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    require_libraries()
    import dask
    import dask_image

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import measure
    from bench import git_commit

    facts = measure.device_facts()
    plan = problems(args.ops, args.size, args.chunk)
    progress(f"GPU {facts['gpu']}; CuPy {facts['cupy']}; Dask {dask.__version__}; commit "
             f"{git_commit()}; {len(plan)} problems")
    t0 = time.perf_counter()
    rows = []
    for problem in plan:
        rows.append(measure_problem(problem, args))
        r = rows[-1]
        progress(f"{r['problem']}: cupyconv {r['cupyconv_GBps']:.1f} GB/s, dask-image "
                 f"{r['dask-image_GBps']:.1f} GB/s, {r['ratio']:.2f}x, max rel {r['err']:.1e}; "
                 f"one call {r['in_memory_GBps']}")
    host = None
    if args.host_size:
        host = host_out_of_core(args.host_size, args.chunk, args)
        progress(f"host out-of-core {host['shape']}: {host['GBps']:.1f} GB/s")
    conv_rows = []
    for layer in (args.layers if args.images else []):
        conv_rows.append(measure_conv_layer(layer, args))
        r = conv_rows[-1]
        progress(f"{layer}: cupyconv.dask {r['cupyconv.dask_img_per_s']:.0f} img/s, loop "
                 f"{r['cupyconv loop_img_per_s']:.0f} img/s ({r['dask_efficiency']:.0%})")
    result = {"benchmark": "dask", **facts, "python": platform.python_version(),
              "dask": dask.__version__, "dask_image": getattr(dask_image, "__version__", "?"),
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "settings": {"dtype": DTYPE, "size": args.size, "chunk": args.chunk,
                           "scheduler": args.scheduler, "workers": args.workers,
                           "repeat": args.repeat, "sigma": SIGMA, "kernel": KERNEL,
                           "tolerance": TOLERANCE, "host_size": args.host_size,
                           "images": args.images, "image_chunk": args.image_chunk},
              "rows": rows, "host_out_of_core": host, "conv_rows": conv_rows,
              "seconds": time.perf_counter() - t0}
    text = markdown(result)
    path = write_results(result, args.out,
                         results_stem(f"dask-{args.size}", facts["gpu"], result["commit"], False),
                         text)
    print(text)
    progress(f"{len(rows)} problems in {result['seconds']:.0f} s; wrote {path} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
