"""Where the wall time of a filtered volume goes on a dask_cuda cluster (issue 20): per worker,
the seconds its tasks computed and received data, by task name, against the wall time.

    python3 benchmarks/experiments/exp_dask_tasks.py [--gpus 1,2] [--size 2048] [--chunk 512]
        [--op gaussian_filter] [--protocol ucx] [--rmm-pool-size 8GB] [--rmm-for-cupy]
        [--message-bytes-limit 1GB] [--unsynced] [--no-fuse] [--pinned] [--floor] [--timeline]

Needs as many GPUs as the largest count, distributed and dask-cuda (and distributed-ucxx for
``--protocol ucx``).  Runs bench_dask_cluster.py's problem once to warm up, then once inside
``distributed.get_task_stream``, each output chunk waited for on its worker (unless
``--unsynced``); prints the time from submitting to the first task starting, and per worker its
busy seconds (compute, transfer), its task counts by name prefix and (``--timeline``) its tasks.
"""

import argparse
import collections
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from bench_dask import discard, graphs, problems, random_volume  # noqa: E402
from bench_dask_cluster import start_cluster  # noqa: E402


def task_prefix(key) -> str:
    name = key[0] if isinstance(key, tuple) else str(key)
    return name.rsplit("-", 1)[0] if "-" in name else name


def report(records, t0: float, wall: float, timeline: bool = False) -> None:
    """Print per worker: busy seconds by action, and compute seconds and counts by task prefix;
    with ``timeline``, also each task in start order as ``<prefix letter>@<start ms>/<compute
    ms>[+<transfer ms>]``."""
    first = min(ss["start"] for r in records for ss in r["startstops"])
    print(f"  wall {wall * 1e3:.1f} ms; first task starts {(first - t0) * 1e3:.1f} ms after "
          f"submitting; {len(records)} tasks")
    by_worker = collections.defaultdict(list)
    for r in records:
        by_worker[r["worker"]].append(r)
    for worker, recs in sorted(by_worker.items()):
        action = collections.Counter()
        prefix_s = collections.Counter()
        prefix_n = collections.Counter()
        last = 0.0
        for r in recs:
            for ss in r["startstops"]:
                action[ss["action"]] += ss["stop"] - ss["start"]
                last = max(last, ss["stop"])
                if ss["action"] == "compute":
                    prefix_s[task_prefix(r["key"])] += ss["stop"] - ss["start"]
            prefix_n[task_prefix(r["key"])] += 1
        busy = ", ".join(f"{a} {s * 1e3:.1f} ms" for a, s in action.most_common())
        print(f"  {worker}: {busy}; last stop {(last - t0) * 1e3:.1f} ms")
        for p, s in prefix_s.most_common(8):
            print(f"    {p}: {prefix_n[p]} tasks, {s * 1e3:.1f} ms")
        if timeline:
            print("    " + " ".join(_timeline(recs, t0)))


def _timeline(records, t0: float) -> list:
    """Each task of one worker as ``<letter>@<start ms>/<compute ms>[+<transfer ms>]``, in the
    order its computing started; the letter is "s" for a slab export, else its name's first."""
    out = []
    for r in records:
        spans = {a: [(ss["start"], ss["stop"]) for ss in r["startstops"] if ss["action"] == a]
                 for a in ("compute", "transfer")}
        if not spans["compute"]:
            continue
        start, stop = spans["compute"][0]
        moved = sum(b - a for a, b in spans["transfer"])
        prefix = task_prefix(r["key"])
        letter = "s" if "slabs" in prefix else prefix[:1]
        out.append((start, f"{letter}@{(start - t0) * 1e3:.0f}/{(stop - start) * 1e3:.1f}"
                    + (f"+{moved * 1e3:.1f}" if moved else "")))
    return [text for _, text in sorted(out)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--op", default="gaussian_filter")
    parser.add_argument("--protocol", default="tcp")
    parser.add_argument("--rmm-pool-size", default=None, help="see bench_dask_cluster.py")
    parser.add_argument("--message-bytes-limit", default=None, help="see bench_dask_cluster.py")
    parser.add_argument("--rmm-for-cupy", action="store_true", help="see bench_dask_cluster.py")
    parser.add_argument("--timeline", action="store_true", help="print each worker's tasks")
    parser.add_argument("--unsynced", action="store_true",
                        help="reduce chunks on the GPU as bench_dask_cluster.py does (a task's "
                             "compute time is then its kernel launches, not its GPU time)")
    parser.add_argument("--no-fuse", action="store_true",
                        help="compute with optimization.fuse.active False on the client (it "
                             "does not keep the layer annotations, the scheduler optimizes with "
                             "its own config: --pinned does)")
    parser.add_argument("--pinned", action="store_true",
                        help="compute unoptimized, as bench_dask_cluster.py --pinned: the "
                             "filter tasks keep their pins to their chunks' workers")
    parser.add_argument("--floor", action="store_true",
                        help="also time the graph of the first step alone (no filter): the "
                             "scheduler's floor for a graph of one task per chunk")
    args = parser.parse_args(argv)
    import cupy
    import dask
    import distributed

    import cupyconv.dask as cd

    (problem,) = problems((args.op,), args.size, args.chunk)
    for gpus in (int(g) for g in args.gpus.split(",")):
        cluster, client = start_cluster(gpus, args.protocol, args.rmm_pool_size,
                                        args.message_bytes_limit, args.rmm_for_cupy)
        with cluster, client:
            volume = cd.distribute(random_volume(problem.size, problem.chunk, cupy))
            reduce = functools.partial(discard, to_host=not args.unsynced)
            runs = {"filter": reduce(graphs(problem, volume)["cupyconv"])}
            if args.floor:
                runs["floor (no filter)"] = reduce(volume)
            for label, lazy in runs.items():
                client.compute(lazy, sync=True, optimize_graph=not args.pinned)
                fusion = {"optimization.fuse.active": False} if args.no_fuse else {}
                with distributed.get_task_stream(client) as stream, dask.config.set(fusion):
                    t0 = time.time()
                    future = client.compute(lazy, optimize_graph=not args.pinned)
                    submitted = time.time() - t0
                    future.result()
                    wall = time.time() - t0
                print(f"{gpus} GPU(s), {problem.label}, {label}, {args.protocol}, "
                      f"{'unsynced' if args.unsynced else 'synced'}, "
                      f"{'no fusion' if args.no_fuse else 'fused'}, "
                      f"{'pinned, ' if args.pinned else ''}"
                      f"{'rmm pool, ' if args.rmm_pool_size else ''}"
                      f"{'cupy on rmm, ' if args.rmm_for_cupy else ''}"
                      + (f"messages up to {args.message_bytes_limit}, "
                         if args.message_bytes_limit else "") +
                      f"halos {cd.halo_transfer(volume)}; the client sent the graph in "
                      f"{submitted * 1e3:.1f} ms:", flush=True)
                report(stream.data, t0, wall, args.timeline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
