"""Measurement shared by the benchmark scripts (bench.py, bench_network.py, bench_host.py,
bench_precision.py, bench_depthwise.py, bench_depthwise_nets.py, experiments/sweep_auto.py).

- device time per call: ``time_gpu`` (CUDA events around back-to-back calls, median of samples);
- wall time per call: :func:`wall_ms` (``perf_counter`` around a loop of calls that ends in a
  device synchronize, median of repeats): what a Python loop of eager calls costs, host included;
- host time per call: :func:`host_us` (``host_overhead_us``: a loop of warm calls without
  synchronizing, median of several loops);
- CUDA-graph replay time: :func:`cupy_graph_ms` (calls captured on a non-blocking CuPy stream)
  and :func:`torch_graph_ms` (``torch.cuda.CUDAGraph``), timed with events around replays;
- input rotation: :func:`rotation_copies` copies of the operands, used in turn, so that the
  working set exceeds ``L2_FACTOR`` times the L2 cache and no call finds its inputs there;
  :func:`rotated_graph_ms` times calls over such copies as a replayed CUDA graph (device time
  of calls shorter than their own host overhead), :func:`torch_operand_copies` makes the copies
  as PyTorch tensors and :func:`cupy_view` shows them to cupyconv in its layout;
- the device's copy rate (:func:`copy_bandwidth`), the yardstick of bandwidth-bound kernels.

The package's timing helpers are imported here, for the scripts to take from this module (one
line to change when they move).  Everything that touches the GPU imports CuPy/PyTorch inside
the function, so the pure parts (rotation, loop sizes, ratios) import and test without a GPU.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cupyconv._core.timing import host_overhead_us, time_gpu  # noqa: E402  (the one import)

__all__ = ["time_gpu", "host_overhead_us", "rotation_copies", "loop_count", "ratio", "geomean",
           "rotating", "synchronize", "device_facts", "load_torch", "torch_facts",
           "set_cudnn_tf32", "host_us", "wall_ms", "cupy_graph_ms", "torch_graph_ms",
           "ours_and_torch_times", "rel_err_gpu", "L2_FACTOR", "MAX_COPIES", "copy_bandwidth", "release_memory",
           "torch_dtype", "torch_operand_copies", "cupy_view", "graph_rounds", "rotated_graph_ms",
           "device_times", "GRAPH_MIN_MS"]

L2_FACTOR = 3      # rotated operands span at least this many times the L2 cache
MAX_COPIES = 8     # ... with at most this many copies of them
# Device work one replay of a timed graph should hold: a graph launch costs a few µs of host and
# device time, which must stay small beside the work it launches.
GRAPH_MIN_MS = 0.2


# ------------------------------------------------------------------------------- pure helpers
def rotation_copies(l2_bytes: int, bytes_per_copy: int, *, factor: float = L2_FACTOR,
                    cap: int = MAX_COPIES) -> int:
    """How many copies of operands of ``bytes_per_copy`` bytes to use in turn so that together
    they span ``factor`` times an L2 cache of ``l2_bytes``: ceil(factor * L2 / bytes), 1 to cap."""
    if bytes_per_copy <= 0:
        return 1
    return max(1, min(cap, math.ceil(factor * l2_bytes / bytes_per_copy)))


def loop_count(target_ms: float, estimate_ms: float, *, multiple: int = 1, lo: int = 1,
               hi: int = 10_000) -> int:
    """Calls per timed loop: enough for about ``target_ms`` at ``estimate_ms`` per call, within
    [lo, hi], rounded up to a multiple of ``multiple`` (each rotated copy used equally often)."""
    n = math.ceil(target_ms / max(estimate_ms, 1e-4))
    n = max(lo, min(hi, n))
    return max(multiple, math.ceil(n / multiple) * multiple)


def ratio(peer, ours):
    """peer / ours (> 1: ours is faster), or None where either time is missing."""
    if peer is None or ours is None or ours <= 0:
        return None
    return peer / ours


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def rotating(call, copies):
    """A function of no arguments that calls ``call(c)`` on each of ``copies`` in turn."""
    it = itertools.cycle(copies)
    return lambda: call(next(it))


def graph_rounds(round_ms: float, *, min_ms: float = GRAPH_MIN_MS, cap: int = 64) -> int:
    """How many rounds over the rotated copies one timed graph holds so that it carries at least
    ``min_ms`` of work, given ``round_ms``, the wall time of one eager round (an over-estimate
    of its device time where the calls are bound by their host time: never too many rounds)."""
    return max(1, min(cap, math.ceil(min_ms / max(round_ms, 1e-3))))


# ------------------------------------------------------------------------------------- device
def synchronize() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def device_facts() -> dict:
    """GPU name and L2 size of the current CuPy device, with the CuPy version."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"gpu": name, "l2_bytes": int(props["l2CacheSize"]), "cupy": cupy.__version__}


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (256 MiB buffers)."""
    import cupy

    a = cupy.ones(64 * 2 ** 20, cupy.float32)
    b = cupy.empty_like(a)
    ms = time_gpu(lambda: cupy.copyto(b, a), repeat=20)
    return 2 * a.nbytes / (ms * 1e-3)


def release_memory(torch) -> None:
    """Hand the pools' cached blocks back between configurations (each can hold gigabytes at
    batch 32), so CuPy's and PyTorch's caches do not both grow to the largest of them."""
    import cupy

    synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    if torch is not None:
        torch.cuda.empty_cache()


def load_torch(quiet: bool = False):
    """PyTorch with cuDNN autotuning on (``cudnn.benchmark``), or None where it is absent (then
    one line on stderr says the cuDNN peer columns are left out, unless ``quiet``)."""
    try:
        import torch
    except ImportError:
        if not quiet:
            print("note: PyTorch is not installed: the cuDNN/cuBLAS peer columns are left out "
                  "(pip install torch for them)", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        if not quiet:
            print("note: PyTorch sees no CUDA device: the cuDNN/cuBLAS peer columns are left out",
                  file=sys.stderr)
        return None
    torch.backends.cudnn.benchmark = True
    return torch


def require_torch(script: str):
    """PyTorch for a script whose whole point is the comparison with it: without it, one line on
    stderr and exit status 2."""
    torch = load_torch(quiet=True)
    if torch is None:
        print(f"{script} needs PyTorch with CUDA (the cuDNN peer it compares against): "
              "pip install torch", file=sys.stderr)
        raise SystemExit(2)
    return torch


def torch_facts(torch) -> dict:
    if torch is None:
        return {"torch": None, "cudnn": None}
    return {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}


def torch_dtype(torch, dtype: str):
    """The PyTorch dtype of a cupyconv dtype name."""
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "float64": torch.float64}[dtype]


def torch_operand_copies(torch, shapes, dtype: str, channels_last: bool, copies: int,
                         seed: int = 0) -> list[tuple]:
    """``copies`` tuples of CUDA tensors of ``shapes`` (NCHW shapes), uniform(-1, 1) from one
    seeded generator, rounded to ``dtype``, 4-d ones in ``torch.channels_last`` memory where
    asked (the peer's fast layout; :func:`cupy_view` shows the same memory to cupyconv as NHWC)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return [tuple(torch.empty(shape, device="cuda").uniform_(-1, 1, generator=gen).to(
        torch_dtype(torch, dtype), memory_format=fmt) for shape in shapes)
        for _ in range(copies)]


def cupy_view(tensor, channels_last: bool):
    """A CuPy array over a tensor's memory (no copy), in cupyconv's layout: NCHW as it is, or a
    channels_last tensor's NHWC view (C-contiguous: (N, H, W, C) for data, (K, kh, kw, C/g) for
    weights)."""
    import cupy

    return cupy.from_dlpack(tensor.permute(0, 2, 3, 1) if channels_last else tensor)


def precision_experiment_args(doc: str, precisions, argv=None):
    """``(args, labels)`` of an experiment script over ``precisions`` ((label, dtype, precision)
    triples): ``--repeat`` and ``--precision`` (comma-separated labels; empty: all)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--precision", default="", help="comma-separated labels (default: all): "
                    + ", ".join(p[0] for p in precisions))
    args = ap.parse_args(argv)
    return args, tuple(v for v in args.precision.split(",") if v)


def set_cudnn_tf32(torch, on: bool) -> bool:
    """Allow (PyTorch's default) or forbid TF32 tensor cores in cuDNN convolutions through
    ``torch.backends.cudnn.allow_tf32``; returns the flag read back (recorded in the results).
    PyTorch >= 2.9 warns that ``torch.backends.cudnn.conv.fp32_precision`` will replace this
    flag; nothing here sets that newer switch, so the two cannot disagree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32 = on
        return bool(torch.backends.cudnn.allow_tf32)


# ------------------------------------------------------------------------------------ timing
def host_us(fn, *, loops: int = 7, calls: int = 50) -> tuple[float, list[float]]:
    """(median, all) host µs per warm call of ``fn()``: ``loops`` loops of ``calls`` calls each,
    none synchronizing (the device may lag; only the Python time is counted)."""
    samples = [host_overhead_us(fn, repeat=calls) for _ in range(loops)]
    return statistics.median(samples), samples


def wall_ms(fn, *, multiple: int = 1, repeat: int = 5, target_ms: float = 50.0,
            max_calls: int = 10_000, sync=synchronize) -> float:
    """Median wall milliseconds per call of ``fn()``: ``perf_counter`` around a loop of calls
    that ends in ``sync()`` (a device synchronize), divided by the calls; ``repeat`` loops of
    about ``target_ms`` each, a multiple of ``multiple`` calls long.  Call ``fn`` once before
    (compilation and planning stay out)."""
    sync()
    t = time.perf_counter()
    fn()
    sync()
    n = loop_count(target_ms, (time.perf_counter() - t) * 1e3, multiple=multiple, hi=max_calls)
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3 / n)
    return statistics.median(times)


def _replay_ms(launch, events, *, repeat: int, target_ms: float) -> float:
    """Median ms per ``launch()``: ``repeat`` samples, each of enough back-to-back launches for
    about ``target_ms`` between two events.  ``events()`` gives fresh (mark_start, mark_stop,
    elapsed) functions; ``elapsed()`` waits for the stop event and returns the ms between."""
    mark_start, mark_stop, elapsed = events()
    mark_start()
    launch()
    mark_stop()
    n = loop_count(target_ms, elapsed(), hi=1000)
    times = []
    for _ in range(repeat):
        mark_start()
        for _ in range(n):
            launch()
        mark_stop()
        times.append(elapsed() / n)
    return statistics.median(times)


def cupy_graph_ms(body, *, per_graph: int = 1, repeat: int = 5, target_ms: float = 20.0) -> float:
    """Device milliseconds of ``body()``'s work replayed as a CUDA graph, divided by ``per_graph``
    (the number of calls or passes ``body`` makes).

    ``body`` runs once under stream capture on a fresh non-blocking CuPy stream: run it eagerly
    before (kernels compiled, calls prepared; nothing may compile or synchronize in a capture).
    What it returns (the outputs the graph writes) stays referenced while the graph exists, and
    the stream too: temporaries freed during the capture return to that stream's pool arena,
    which nothing else allocates from while the graph is replayed here.
    """
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    synchronize()  # the capture stream does not wait for the legacy stream: settle inputs first
    with stream:
        stream.begin_capture()
        try:
            keep = body()
        except BaseException:
            try:
                stream.end_capture()
            except Exception:
                pass
            raise
        graph = stream.end_capture()
        graph.launch(stream)  # the first launch uploads the graph
        stream.synchronize()

        def events():
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()

            def elapsed():
                stop.synchronize()
                return cupy.cuda.get_elapsed_time(start, stop)

            return (lambda: start.record(stream)), (lambda: stop.record(stream)), elapsed

        ms = _replay_ms(lambda: graph.launch(stream), events, repeat=repeat, target_ms=target_ms)
        stream.synchronize()
    del keep  # the outputs: referenced until the replays are done
    return ms / per_graph


def torch_graph_ms(torch, body, *, per_graph: int = 1, repeat: int = 5,
                   target_ms: float = 20.0) -> float:
    """As :func:`cupy_graph_ms` for PyTorch work: ``body()`` warmed up on a side stream (as
    PyTorch's CUDA-graph notes ask), captured into a ``torch.cuda.CUDAGraph``, replayed on the
    current stream between CUDA events.  Call ``body`` eagerly before too (cuDNN's autotuning
    must not run inside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        keep = body()
    graph.replay()
    torch.cuda.synchronize()

    def events():
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)

        def elapsed():
            stop.synchronize()
            return start.elapsed_time(stop)

        return start.record, stop.record, elapsed

    ms = _replay_ms(graph.replay, events, repeat=repeat, target_ms=target_ms)
    torch.cuda.synchronize()
    del keep
    return ms / per_graph


def rotated_graph_ms(call, copies, graph_ms, *, repeat: int = 5, target_ms: float = 10.0) -> float:
    """Device ms per call of ``call(c)`` over ``copies`` used in turn.

    One eager round over the copies warms up (compiles, prepares, autotunes); a second, timed by
    wall clock, sizes the graph (:func:`graph_rounds`); then ``graph_ms`` (:func:`cupy_graph_ms`,
    or :func:`torch_graph_ms` bound to torch) captures that many rounds, each call reading
    operands that the calls before it pushed out of L2, and times their replays.  Back-to-back
    eager calls of a layer that takes less device time than a call's Python would measure the
    host instead."""
    def one_round():
        return [call(c) for c in copies]

    one_round()
    synchronize()
    t = time.perf_counter()
    one_round()
    synchronize()
    rounds = graph_rounds((time.perf_counter() - t) * 1e3)
    return graph_ms(lambda: [call(c) for _ in range(rounds) for c in copies],
                    per_graph=rounds * len(copies), repeat=repeat, target_ms=target_ms)


def ours_and_torch_times(torch, ours, arrays, peer, tensors, *, repeat: int = 5,
                         target_ms: float = 10.0, log=print) -> tuple[dict, str, str | None]:
    """:func:`device_times` of our call on the CuPy ``arrays`` (copies rotated past L2) and the
    PyTorch peer's on ``tensors``, as {"ours": ms, "peer": ms}, how, why."""
    import functools

    return device_times({"ours": (ours, arrays, cupy_graph_ms),
                         "peer": (peer, tensors, functools.partial(torch_graph_ms, torch))},
                        repeat=repeat, target_ms=target_ms, log=log)


def device_times(calls: dict, *, repeat: int = 5, target_ms: float = 10.0,
                 log=print) -> tuple[dict, str, str | None]:
    """({name: device ms per call}, how, why) for ``calls`` (name -> (call, copies, graph_ms)),
    each timed by :func:`rotated_graph_ms` (how = "graph").  Where any of them cannot be
    captured (a call that synchronizes, say), all are timed again as eager back-to-back calls
    between events (:func:`time_gpu`, how = "events", why = the capture's error), so that ratios
    between them never mix the two kinds of time."""
    try:
        return {name: rotated_graph_ms(call, copies, graph_ms, repeat=repeat, target_ms=target_ms)
                for name, (call, copies, graph_ms) in calls.items()}, "graph", None
    except Exception as exc:  # (CuPy and PyTorch raise their own types for a failed capture)
        why = f"{type(exc).__name__}: {exc}"
        log(f"    graph capture failed ({why}); timing eager calls between events instead")
        synchronize()
        return {name: time_gpu(rotating(call, copies), repeat=4 * repeat)
                for name, (call, copies, _) in calls.items()}, "events", why


def rel_err_gpu(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64, computed on the GPU (CuPy arrays or DLPack tensors)."""
    import cupy

    a = cupy.from_dlpack(out) if not isinstance(out, cupy.ndarray) else out
    b = cupy.from_dlpack(ref) if not isinstance(ref, cupy.ndarray) else ref
    a, b = a.astype(cupy.float64), b.astype(cupy.float64)
    if a.shape != b.shape:
        return math.inf
    denom = float(cupy.sqrt((b * b).sum()))
    diff = float(cupy.sqrt(((a - b) ** 2).sum()))
    return diff / (denom if denom > 0 else 1.0) if math.isfinite(diff) else math.inf
