"""cupyconv.dask on a multi-GPU ``dask_cuda.LocalCUDACluster`` (issue 20): throughput and scaling
efficiency of the 3-d volume filters (against dask-image with cupyx on the same cluster) and of
the batched ResNet-50 convolutions, on 1, 2, ... GPUs (one worker per GPU).

    python3 benchmarks/bench_dask_cluster.py [--gpus 1,2] [--size 1024] [--chunk 256]
        [--ops gaussian_filter,correlate] [--images 65536] [--image-chunk 1024]
        [--layers "res2 3x3 64,res3 3x3 128"] [--repeat 3] [--protocol tcp] [--rmm-pool-size 8GB]
        [--rmm-for-cupy] [--pinned] [--message-bytes-limit 1GB]
        [--out DIR]

The problems are bench_dask.py's: a float32 ``--size``^3 volume generated chunk by chunk on the
workers' GPUs and held there in one box of chunks per worker (``cupyconv.dask.distribute``),
filtered (gaussian_filter sigma 2, a dense 7^3 correlate; mode reflect) by cupyconv.dask and by
dask_image.ndfilters (cupyx.scipy.ndimage on CuPy chunks); on two or more GPUs also by
cupyconv.dask on the volume persisted where the scheduler puts its chunks; ``--images``
float32 NCHW images in batch chunks of ``--image-chunk``, each ResNet-50 layer by
cupyconv.dask.conv.  Each output chunk is reduced to one element on its worker, so results do not
travel.  One cluster per GPU count: ``LocalCUDACluster(n_workers=n)`` on GPUs 0 .. n-1, one thread
per worker, over ``--protocol`` (tcp; ucx needs distributed-ucxx), each worker's RMM with a pool
of ``--rmm-pool-size``; ``--pinned``: cupyconv's graphs computed unoptimized (``optimize_graph=
False``), which keeps their worker pins (:func:`cupyconv.dask.distribute`).

Timing: wall time of ``client.compute`` of the whole graph, best of ``--repeat`` after one
warm-up; for the convolutions minus the best time of the generation-only graph ("net"), the
volumes being in memory before.  GB/s = (input read + output written) / time; images/s =
images / net.  Scaling efficiency of n GPUs = (rate on n / rate on 1) / n.  Writes
``dask-cluster-<size>-chunk<chunk>[-<protocol>][-rmm-pool][-cupy][-pinned][-msg<limit>]-<gpu>-
<commit>.json`` and ``.md`` into ``--out``.  Needs dask[array], distributed, dask-cuda and
dask-image: without them it says so and exits with 2.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_dask import (LIBS, OPS, conv_layers, conv_problem, discard, graphs,  # noqa: E402
                        max_rel_diff, problems, random_images, random_volume, require_libraries)
from bench_depthwise_nets import progress, results_stem, split_choices, write_results  # noqa: E402

LAYERS = ("res2 3x3 64", "res3 3x3 128", "res4 3x3 256")
TARGET = 0.8  # scaling efficiency from 1 to 2 GPUs (issue 20)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1,2", help="GPU counts, one cluster each (1,2)")
    parser.add_argument("--size", type=int, default=1024, help="edge of the cubic volume (1024)")
    parser.add_argument("--chunk", type=int, default=256, help="edge of a cubic chunk (256)")
    parser.add_argument("--ops", default=",".join(OPS))
    # (4096 images in chunks of 256 measured nothing: ~10 ms of GPU work per graph under ~90 ms
    # of scheduling, which overlaps it)
    parser.add_argument("--images", type=int, default=65536, help="images (0: skip the convs)")
    parser.add_argument("--image-chunk", type=int, default=1024)
    parser.add_argument("--layers", default=",".join(LAYERS), help="ResNet-50 layers or 'all'")
    parser.add_argument("--repeat", type=int, default=3)
    # ucx (distributed-ucxx installed): GPU to GPU over NVLink / CUDA IPC; tcp stages every
    # transfer through host memory (0.25-0.85 GB/s between two H200 workers, exp_dask_comm.py)
    parser.add_argument("--protocol", default="tcp", choices=("tcp", "ucx", "ucxx"),
                        help="the cluster's comm (tcp)")
    # the graph optimization, run on the scheduler, fuses tasks and so drops every layer
    # annotation, cupyconv.dask's pins of placed tasks to their workers among them
    parser.add_argument("--pinned", action="store_true",
                        help="compute cupyconv's graphs unoptimized, so that the scheduler "
                             "keeps their tasks on their chunks' workers")
    parser.add_argument("--rmm-pool-size", default=None,
                        help="each worker's RMM pool, e.g. 8GB (default none; see start_cluster)")
    parser.add_argument("--message-bytes-limit", default=None,
                        help="the workers' largest message of fetched keys, e.g. 1GB "
                             "(default: distributed's, 50MB; see start_cluster)")
    parser.add_argument("--rmm-for-cupy", action="store_true",
                        help="CuPy allocates through the workers' RMM (see start_cluster)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    split_choices(parser, args, {"ops": OPS})
    args.gpus = [int(g) for g in args.gpus.split(",") if g]
    if not args.gpus or min(args.gpus) < 1:
        parser.error("--gpus: a comma list of GPU counts >= 1")
    args.layers = conv_layers(args.layers, parser)
    return args


def start_cluster(gpus: int, protocol: str = "tcp", rmm_pool_size: str | None = None,
                  message_bytes_limit: str | None = None, rmm_for_cupy: bool = False):
    """(cluster, client): one dask_cuda worker process per GPU 0 .. gpus-1, talking ``protocol``;
    the workers import cupyconv from this checkout (PYTHONPATH).  ``rmm_pool_size`` (e.g.
    "8GB"): each worker's RMM allocates from a pool of that size (UCX receives GPU buffers
    through RMM, whose default cudaMalloc and cudaFree wait for the whole device; RMM's
    cudaMallocAsync instead made UCX transfers about 10x slower, 2 x H200: notes/dask.md).
    ``message_bytes_limit`` (e.g. "1GB"): the workers' ``distributed.worker.transfer.
    message-bytes-limit`` (default 50MB): a worker fetches from one peer one message at a time,
    each holding keys up to that many bytes (suspected, and ruled out, as the cause of slow
    slab transfers: notes/dask.md, "Session 26").  ``rmm_for_cupy``: CuPy
    allocates through the workers' RMM (dask_cuda's ``rmm_allocator_external_lib_list``), so
    arrays sent over UCX lie in the few allocations of RMM's pool: CUDA IPC maps each
    allocation a transfer reads from once, and CuPy's own pool carves arrays out of ever other
    allocations."""
    import dask
    import distributed
    from dask_cuda import LocalCUDACluster

    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    limit = ({"distributed.worker.transfer.message-bytes-limit": message_bytes_limit}
             if message_bytes_limit else {})
    with dask.config.set(limit):  # the nannies hand this config to their worker processes
        cluster = LocalCUDACluster(n_workers=gpus,
                                   CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))),
                                   threads_per_worker=1, protocol=protocol,
                                   dashboard_address=None, rmm_pool_size=rmm_pool_size,
                                   rmm_allocator_external_lib_list=["cupy"] if rmm_for_cupy
                                   else None, silence_logs=40)
    return cluster, distributed.Client(cluster)


def best_seconds(client, lazy, repeat: int, optimize_graph: bool = True) -> float:
    """Best wall seconds of computing ``lazy`` on the cluster over ``repeat`` runs after one
    warm-up (the first run compiles kernels on every worker)."""
    times = []
    for i in range(repeat + 1):
        t = time.perf_counter()
        client.compute(lazy, sync=True, optimize_graph=optimize_graph)
        if i:
            times.append(time.perf_counter() - t)
    return min(times)


def volume_rows(client, gpus: int, args) -> list[dict]:
    """Per filter: the volume placed in one box of chunks per worker (``cupyconv.dask.distribute``)
    and filtered by cupyconv.dask and by dask-image from there; on two or more GPUs also
    cupyconv.dask on the volume persisted where the scheduler puts its chunks (interleaved over
    the workers: every halo is a slab that moves)."""
    import cupy
    import distributed

    import cupyconv.dask as cd

    rows = []
    for problem in problems(args.ops, args.size, args.chunk):
        t = time.perf_counter()
        volume = cd.distribute(random_volume(problem.size, problem.chunk, cupy))
        placing = time.perf_counter() - t
        lazy = graphs(problem, volume)
        corner = tuple(slice(0, problem.chunk) for _ in range(3))
        err = max_rel_diff(*(cupy.asnumpy(client.compute(lazy[lib][corner], sync=True))
                             for lib in LIBS))
        row = {"gpus": gpus, "problem": problem.label, "bytes": problem.nbytes,
               "placing_s": placing, "halo": cd.halo_transfer(volume), "err": err}
        for lib in LIBS:
            seconds = best_seconds(client, discard(lazy[lib]), args.repeat,
                                   optimize_graph=not (args.pinned and lib == "cupyconv"))
            row[f"{lib}_s"] = seconds
            row[f"{lib}_GBps"] = problem.nbytes / seconds / 1e9
        del lazy, volume
        if gpus > 1:
            scattered = client.persist(random_volume(problem.size, problem.chunk, cupy))
            distributed.wait(scattered)
            row["halo_unplaced"] = cd.halo_transfer(scattered)
            seconds = best_seconds(client, discard(graphs(problem, scattered)["cupyconv"]),
                                   args.repeat, optimize_graph=not args.pinned)
            row["cupyconv_unplaced_GBps"] = problem.nbytes / seconds / 1e9
            del scattered
        progress(f"{gpus} GPU(s) {problem.label}: cupyconv {row['cupyconv_GBps']:.1f} GB/s "
                 f"({row['halo']} halos; placing {placing:.2f} s), dask-image "
                 f"{row['dask-image_GBps']:.1f} GB/s, unplaced "
                 f"{_rate(row.get('cupyconv_unplaced_GBps'))} GB/s, max rel {err:.1e}")
        rows.append(row)
    return rows


def conv_rows(client, gpus: int, args) -> list[dict]:
    import numpy as np

    import cupyconv.dask as cd

    rows = []
    for layer in args.layers if args.images else []:
        image, wshape, opts = conv_problem(layer)
        w = np.random.default_rng(2).uniform(-1, 1, wshape).astype(np.float32)  # one key
        batch = random_images(args.images, args.image_chunk, image)
        generation = best_seconds(client, discard(batch), args.repeat)
        seconds = best_seconds(client, discard(cd.conv(batch, w, **opts)), args.repeat)
        rate = args.images / max(seconds - generation, 1e-9)
        progress(f"{gpus} GPU(s) {layer}: {rate:.0f} img/s")
        rows.append({"gpus": gpus, "layer": layer, "images": args.images,
                     "generation_s": generation, "s": seconds, "img_per_s": rate})
    return rows


def efficiencies(rows: list[dict], key: str, rate: str) -> None:
    """Add ``efficiency`` (rate on n GPUs / (n x rate on 1)) to each row that has a 1-GPU row of
    the same ``key``."""
    one = {r[key]: r[rate] for r in rows if r["gpus"] == 1}
    for r in rows:
        if r[key] in one:
            r[f"{rate}_efficiency"] = r[rate] / (r["gpus"] * one[r[key]])


def _rate(gbps) -> str:
    """A table cell: GB/s with one decimal, or "-" where not measured."""
    return "-" if gbps is None else f"{gbps:.1f}"


PINNED = "  cupyconv's graphs sent unoptimized: their tasks pinned to their chunks' workers."


def _cluster_setup(s: dict) -> str:
    """The cluster's settings in the report's words, e.g. "UCX, RMM pool 16GB, one thread
    each" (results written before a setting existed lack its key)."""
    parts = [s.get("protocol", "tcp").upper()]
    if s.get("rmm_pool_size"):
        parts.append(f"RMM pool {s['rmm_pool_size']}")
    if s.get("rmm_for_cupy"):
        parts.append("CuPy on RMM")
    if s.get("message_bytes_limit"):
        parts.append(f"messages up to {s['message_bytes_limit']}")
    return ", ".join(parts + ["one thread each"])


def markdown(result: dict) -> str:
    s = result["settings"]
    lines = [f"# cupyconv.dask on a dask_cuda cluster, {result['gpu']} x {max(s['gpus'])} "
             f"(commit {result['commit']})", "",
             f"One worker per GPU (LocalCUDACluster, {_cluster_setup(s)}); best of "
             f"{s['repeat']} after a warm-up.  Volumes in memory, one box of chunks per worker "
             f"(cupyconv.dask.distribute); 'unplaced': cupyconv.dask on the volume persisted "
             f"where the scheduler put its chunks.{PINNED if s.get('pinned') else ''}"
             f"  Efficiency = rate on n GPUs / (n x rate on "
             f"1); target >= {TARGET:.0%} from 1 to 2 GPUs.", "",
             "| problem | GPUs | cupyconv GB/s | efficiency | halos | unplaced GB/s | "
             "dask-image GB/s | efficiency | ours / dask-image | max rel diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["volume_rows"]:
        lines.append(f"| {r['problem']} | {r['gpus']} | {r['cupyconv_GBps']:.1f} | "
                     f"{r.get('cupyconv_GBps_efficiency', float('nan')):.0%} | "
                     f"{r.get('halo', '-')} | "
                     f"{_rate(r.get('cupyconv_unplaced_GBps'))} | "
                     f"{r['dask-image_GBps']:.1f} | "
                     f"{r.get('dask-image_GBps_efficiency', float('nan')):.0%} | "
                     f"{r['cupyconv_GBps'] / r['dask-image_GBps']:.2f}x | {r['err']:.1e} |")
    if result["conv_rows"]:
        lines += ["", f"Batched ResNet-50 convolutions, {s['images']} float32 images in chunks "
                  f"of {s['image_chunk']}:", "", "| layer | GPUs | images/s | efficiency |",
                  "|---|---|---|---|"]
        for r in result["conv_rows"]:
            lines.append(f"| {r['layer']} | {r['gpus']} | {r['img_per_s']:.0f} | "
                         f"{r.get('img_per_s_efficiency', float('nan')):.0%} |")
    return "\n".join(lines) + "\n"


def settings_stem(args) -> str:
    """The results' name before GPU and commit: the volume, the chunks and each non-default
    cluster setting, so that runs of one volume in other settings do not overwrite each other."""
    return (f"dask-cluster-{args.size}-chunk{args.chunk}"
            + (f"-{args.protocol}" if args.protocol != "tcp" else "")
            + ("-rmm-pool" if args.rmm_pool_size else "") + ("-cupy" if args.rmm_for_cupy else "")
            + ("-pinned" if args.pinned else "")
            + (f"-msg{args.message_bytes_limit}" if args.message_bytes_limit else ""))


def main(argv=None) -> int:
    args = parse_args(argv)
    require_libraries(("dask.array", "dask_image.ndfilters", "distributed", "dask_cuda"))
    import cupy
    import dask

    import cupyconv.dask as cd
    import measure
    from bench import git_commit

    available = cupy.cuda.runtime.getDeviceCount()
    if max(args.gpus) > available:
        print(f"--gpus {max(args.gpus)}: this machine has {available} GPU(s)", file=sys.stderr)
        return 2
    facts = measure.device_facts()
    progress(f"GPU {facts['gpu']} x {available}; Dask {dask.__version__}; commit {git_commit()}")
    t0 = time.perf_counter()
    volume, convs = [], []
    for gpus in args.gpus:
        cluster, client = start_cluster(gpus, args.protocol, args.rmm_pool_size,
                                        args.message_bytes_limit, args.rmm_for_cupy)
        try:
            assert len(client.scheduler_info()["workers"]) == gpus
            progress(f"{gpus} GPU(s): halo transfer {cd.halo_transfer()}")
            volume += volume_rows(client, gpus, args)
            convs += conv_rows(client, gpus, args)
        finally:
            client.close()
            cluster.close()
    for lib in LIBS:
        efficiencies(volume, "problem", f"{lib}_GBps")
    efficiencies(convs, "layer", "img_per_s")
    result = {"benchmark": "dask-cluster", **facts, "gpus_available": available,
              "python": platform.python_version(), "dask": dask.__version__,
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "settings": {"gpus": args.gpus, "size": args.size, "chunk": args.chunk,
                           "images": args.images, "image_chunk": args.image_chunk,
                           "repeat": args.repeat, "protocol": args.protocol,
                           "rmm_pool_size": args.rmm_pool_size,
                           "message_bytes_limit": args.message_bytes_limit,
                           "rmm_for_cupy": args.rmm_for_cupy,
                           "pinned": args.pinned},
              "volume_rows": volume, "conv_rows": convs, "seconds": time.perf_counter() - t0}
    text = markdown(result)
    path = write_results(result, args.out, results_stem(settings_stem(args), facts["gpu"],
                                                        result["commit"], False), text)
    print(text)
    progress(f"{time.perf_counter() - t0:.0f} s; wrote {path} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
