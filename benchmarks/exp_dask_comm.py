"""How fast a dask_cuda cluster moves a CuPy array between two workers (issue 20): the ceiling on
the halo slabs that cupyconv.dask's filters exchange between GPUs.

    python3 benchmarks/exp_dask_comm.py [--protocol tcp] [--sizes 8,64,256] [--repeat 3]

Needs two GPUs, distributed and dask-cuda (and distributed-ucxx for ``--protocol ucx``).
Prints, per size in MB, the wall time of a task on worker 1 that reads an array made on worker
0 (``--repeat`` times; the first includes connecting).
"""

import argparse
import time


def make(n):
    import cupy

    return cupy.ones(n, dtype=cupy.float32)


def touch(a):
    return float(a[:1].sum())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,256", help="array sizes in MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--protocol", default="tcp", help="the cluster's comm: tcp or ucx")
    args = parser.parse_args(argv)
    import distributed
    from dask_cuda import LocalCUDACluster

    with LocalCUDACluster(n_workers=2, CUDA_VISIBLE_DEVICES="0,1", threads_per_worker=1,
                          protocol=args.protocol, dashboard_address=None,
                          silence_logs=40) as cluster, distributed.Client(cluster) as client:
        source, sink = sorted(client.scheduler_info()["workers"])
        for mb in (int(s) for s in args.sizes.split(",")):
            for _ in range(args.repeat):
                made = client.submit(make, mb * 2**20 // 4, workers=[source], pure=False)
                distributed.wait(made)
                t = time.perf_counter()
                client.submit(touch, made, workers=[sink], pure=False).result()
                dt = time.perf_counter() - t
                print(f"{mb} MB worker 0 -> worker 1 over {args.protocol}: {dt * 1e3:.1f} ms, "
                      f"{mb / 1024 / dt:.2f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
