"""How fast a dask_cuda cluster moves a CuPy array between two workers (issue 20): the ceiling on
the halo slabs that cupyconv.dask's filters exchange between GPUs.

    python3 benchmarks/experiments/exp_dask_comm.py [--protocol tcp] [--sizes 8,64,256] [--repeat 3]
        [--pieces 1,4] [--rmm-pool-size 16GB]

Needs two GPUs, distributed and dask-cuda (and distributed-ucxx for ``--protocol ucx``).
Prints, per size in MB and number of pieces, the wall time of a task on worker 1 that reads an
array made on worker 0, or a dict of that many arrays of the size in all (as cupyconv.dask's
slab exports are), ``--repeat`` times (the first includes connecting); each worker's RMM with a
pool of ``--rmm-pool-size``.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from bench_dask_cluster import start_cluster  # noqa: E402


def make(n, pieces=1):
    import cupy

    if pieces == 1:
        return cupy.ones(n, dtype=cupy.float32)
    return {(k, 0): cupy.ones(n // pieces, dtype=cupy.float32) for k in range(pieces)}


def touch(a):
    return float(sum(v[:1].sum() for v in a.values()) if isinstance(a, dict) else a[:1].sum())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,256", help="array sizes in MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--protocol", default="tcp", help="the cluster's comm: tcp or ucx")
    parser.add_argument("--pieces", default="1", help="arrays per transfer, e.g. 1,4")
    parser.add_argument("--rmm-pool-size", default=None, help="each worker's RMM pool")
    args = parser.parse_args(argv)
    import distributed

    cluster, client = start_cluster(2, args.protocol, args.rmm_pool_size)
    with cluster, client:
        source, sink = sorted(client.scheduler_info()["workers"])
        pool = f", RMM pool {args.rmm_pool_size}" if args.rmm_pool_size else ""
        for mb in (int(s) for s in args.sizes.split(",")):
            for pieces in (int(p) for p in args.pieces.split(",")):
                for _ in range(args.repeat):
                    made = client.submit(make, mb * 2**20 // 4, pieces, workers=[source],
                                         pure=False)
                    distributed.wait(made)
                    t = time.perf_counter()
                    client.submit(touch, made, workers=[sink], pure=False).result()
                    dt = time.perf_counter() - t
                    print(f"{mb} MB in {pieces} piece(s) worker 0 -> worker 1 over "
                          f"{args.protocol}{pool}: {dt * 1e3:.1f} ms, {mb / 1024 / dt:.2f} GB/s",
                          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
