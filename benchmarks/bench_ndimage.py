"""cupyconv.ndimage against cupyx.scipy.ndimage, the same calls (issue 18, item 3).

    python3 benchmarks/bench_ndimage.py [--out DIR] [--repeat 5] [--quick] [--ndims 2,3]
        [--ops correlate,gaussian_filter,uniform_filter,sobel]

Problems: float32 arrays of 4096^2 (2-d) and 256^3 (3-d), each with
``correlate`` and dense random weights of 3, 7 and 15 per axis (15^3 = 3375 taps in 3-d),
``gaussian_filter`` with sigma 1, 2 and 5, ``uniform_filter`` with size 5 and 15, and ``sobel``
along axis 0 and -1; every call in mode "reflect" (both libraries' default).  Both libraries get
the same input arrays and the same weight values (NumPy weights for cupyconv, which reads them
on the host; a CuPy copy for cupyx, which wants device arrays).

Each result is checked against cupyx's: max |ours - cupyx| / max |cupyx| above ``TOLERANCE``
is flagged as a mismatch.  Device time: inputs rotate over copies spanning at least 3x the L2,
the calls over them are captured into a CUDA graph and replayed (``measure.device_times``),
each side on its own: where a side's capture fails (cupyx's gaussian_filter and sobel copy their
weights from the host in every call), that side is timed as eager back-to-back calls between
CUDA events (``timing`` says which, per side) and ours also eagerly, reported beside.
Problems whose single call takes over ``SLOW_MS`` run with 2 samples.  Ratio = cupyx time /
ours (> 1: cupyconv faster).

Summary: geometric mean and minimum of the ratio over all problems and per (ndim, op), the
mismatches, and the target line (issue 18: >= 3x cupyx as the geometric mean, none slower).

Writes ``ndimage-<gpu>-<commit>[-quick].json`` and ``.md`` into ``--out`` (progress on stderr,
the tables on stdout).  The full run takes a few minutes on an H100, most of it cupyx's 3-d
15^3 correlation.
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

import measure  # noqa: E402
from bench import git_commit  # noqa: E402
from bench_depthwise_nets import progress, results_stem, split_choices, write_results  # noqa: E402

SHAPES = {2: (4096, 4096), 3: (256, 256, 256)}
DTYPE = "float32"
NDIMS = (2, 3)
# op -> its parameters (correlate: weights per axis; gaussian: sigma; uniform: size; sobel: axis)
OPS = {"correlate": (3, 7, 15), "gaussian_filter": (1.0, 2.0, 5.0),
       "uniform_filter": (5, 15), "sobel": (0, -1)}
PARAM_NAME = {"correlate": "k", "gaussian_filter": "sigma", "uniform_filter": "size",
              "sobel": "axis"}
# Issue 18's bars: 3x cupyx as the geometric mean over the problems, none slower
TARGETS = {"geomean": 3.0, "min": 1.0}
TOLERANCE = 1e-4      # max relative difference of two float32 results still called agreement
SLOW_MS = 200.0       # a call slower than this is timed with 2 samples (cupyx's 3-d 15^3)
QUICK = ("2-d correlate k=7", "3-d correlate k=3", "2-d gaussian_filter sigma=2",
         "3-d uniform_filter size=5", "3-d sobel axis=0")


class Problem(NamedTuple):
    """One benchmark call: ``op`` with ``param`` on the float32 array of ``SHAPES[ndim]``."""

    ndim: int
    op: str
    param: float

    @property
    def shape(self) -> tuple[int, ...]:
        return SHAPES[self.ndim]

    @property
    def label(self) -> str:
        value = f"{self.param:g}" if isinstance(self.param, float) else str(self.param)
        return f"{self.ndim}-d {self.op} {PARAM_NAME[self.op]}={value}"

    @property
    def taps(self) -> int:
        """Filter taps per output: the dense N-d filter's, or the sum over the 1-d passes."""
        n = self.ndim
        if self.op == "correlate":
            return self.param ** n
        if self.op == "gaussian_filter":
            return n * (2 * int(4.0 * self.param + 0.5) + 1)  # SciPy's radius, truncate 4
        if self.op == "uniform_filter":
            return n * self.param
        return 3 * n  # sobel: [-1, 0, 1] along the axis, [1, 2, 1] along every other

    @property
    def nbytes(self) -> int:
        """Bytes a perfect kernel moves: the input read once, the output written once."""
        size = 1
        for s in self.shape:
            size *= s
        return 2 * 4 * size


def problems(ndims=NDIMS, ops=tuple(OPS), quick: bool = False) -> list[Problem]:
    """The problems of ``ndims`` x ``ops``, ndim by ndim in the order of OPS; with ``quick``
    only those of QUICK."""
    out = [Problem(n, op, p) for n in NDIMS if n in ndims for op in OPS if op in ops
           for p in OPS[op]]
    return [p for p in out if not quick or p.label in QUICK]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--ndims", default="2,3")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--repeat", type=int, help="timed samples per measurement (default 5, "
                        "3 with --quick)")
    parser.add_argument("--target-ms", type=float, default=10.0, help="length of one sample")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: {', '.join(QUICK)}")
    for key, value in TARGETS.items():
        parser.add_argument(f"--target-{key}", type=float, default=value, dest=f"target_{key}",
                            help=f"bar of the target line ({value})")
    args = parser.parse_args(argv)
    split_choices(parser, args, {"ndims": tuple(str(n) for n in NDIMS), "ops": tuple(OPS)})
    args.ndims = [int(n) for n in args.ndims]
    args.targets = {key: getattr(args, f"target_{key}") for key in TARGETS}
    return args


def host_weights(problem: Problem):
    """The dense float32 weights of a correlate problem (uniform in [-1, 1), seeded by the
    label), or None."""
    import numpy as np

    if problem.op != "correlate":
        return None
    rng = np.random.default_rng(zlib.crc32(problem.label.encode()))
    return rng.uniform(-1, 1, (problem.param,) * problem.ndim).astype(np.float32)


# ------------------------------------------------------------------------------------ GPU part
def calls(problem: Problem):
    """(cupyconv call, cupyx call), each of one input array."""
    import cupy
    import cupyx.scipy.ndimage as peer

    import cupyconv.ndimage as ours

    op, p = problem.op, problem.param
    if op == "correlate":
        w = host_weights(problem)
        w_dev = cupy.asarray(w)
        return (lambda x: ours.correlate(x, w)), (lambda x: peer.correlate(x, w_dev))
    return (lambda x: getattr(ours, op)(x, p)), (lambda x: getattr(peer, op)(x, p))


def max_rel_diff(out, ref) -> float:
    """max |out - ref| / max |ref| (float64, on the GPU); inf on a shape or dtype mismatch."""
    import cupy

    if out.shape != ref.shape or out.dtype != ref.dtype:
        return float("inf")
    scale = float(cupy.abs(ref).max())
    diff = float(cupy.abs(out.astype(cupy.float64) - ref.astype(cupy.float64)).max())
    return diff / (scale if scale > 0 else 1.0)


def wall_once(fn, x) -> float:
    """Wall ms of one synchronized call."""
    measure.synchronize()
    t = time.perf_counter()
    fn(x)
    measure.synchronize()
    return (time.perf_counter() - t) * 1e3


def measure_problem(problem: Problem, l2_bytes: int, args) -> dict:
    import cupy

    ours, peer = calls(problem)
    copies = measure.rotation_copies(l2_bytes, problem.nbytes)
    gen = cupy.random.default_rng(zlib.crc32(problem.label.encode()))
    inputs = [gen.uniform(-1, 1, problem.shape, dtype=cupy.float32) for _ in range(copies)]
    err = max_rel_diff(ours(inputs[0]), peer(inputs[0]))  # (the first calls also compile)
    once = {"ours": wall_once(ours, inputs[0]), "cupyx": wall_once(peer, inputs[0])}
    repeat = 2 if max(once.values()) > SLOW_MS else args.repeat
    # Each side on its own: a side whose capture fails (cupyx's gaussian_filter and sobel copy
    # their weights from the host in every call) is timed as eager calls, the other keeps its
    # graph; where they differ, ours is also timed eagerly (``ours_events_ms``) for comparison.
    times, timing, errors = {}, {}, {}
    for name, fn in (("ours", ours), ("cupyx", peer)):
        t, how, why = measure.device_times({name: (fn, inputs, measure.cupy_graph_ms)},
                                           repeat=repeat, target_ms=args.target_ms, log=progress)
        times[name], timing[name] = t[name], how
        if why:
            errors[name] = why
    row = {"problem": problem.label, "ndim": problem.ndim, "op": problem.op,
           "param": problem.param, "shape": list(problem.shape), "dtype": DTYPE,
           "taps": problem.taps, "bytes": problem.nbytes, "copies": copies, "repeat": repeat,
           "ours_ms": times["ours"], "cupyx_ms": times["cupyx"],
           "ratio": measure.ratio(times["cupyx"], times["ours"]),
           "GBps": problem.nbytes / (times["ours"] * 1e-3) / 1e9,
           "err": err, "ok": err <= TOLERANCE, "timing": timing}
    if timing["ours"] != timing["cupyx"]:
        row["ours_events_ms"] = measure.time_gpu(measure.rotating(ours, inputs),
                                                 repeat=4 * repeat)
    if errors:
        row["graph_error"] = errors
    return row


def timing_label(row: dict) -> str:
    """How each side was timed: "graph", "events", or "ours graph, cupyx events"."""
    t = row["timing"]
    if isinstance(t, str):  # (results of earlier runs: one kind for both sides)
        return t
    return t["ours"] if t["ours"] == t["cupyx"] else f"ours {t['ours']}, cupyx {t['cupyx']}"


def row_line(row: dict) -> str:
    flag = "" if row["ok"] else f"  MISMATCH max rel {row['err']:.1e}"
    return (f"{row['problem']:30s} ours {row['ours_ms']:9.4f} ms  cupyx {row['cupyx_ms']:9.4f} "
            f"ms  {_x(row['ratio'])}  max rel {row['err']:.1e}{flag}")


# --------------------------------------------------------------------------- summary, report
def summary(rows, targets=TARGETS) -> list[dict]:
    """One line for all problems, then one per (ndim, op) present: geometric mean and minimum
    (with its problem) of cupyx / ours, mismatches; the first line carries ``target``:
    {bar: met?} (None where no problem was timed)."""
    groups = [("all", rows)]
    for n in NDIMS:
        for op in OPS:
            part = [r for r in rows if r["ndim"] == n and r["op"] == op]
            if part:
                groups.append((f"{n}-d {op}", part))
    out = []
    for name, part in groups:
        timed = [r for r in part if r["ratio"] is not None]
        worst = min(timed, key=lambda r: r["ratio"], default=None)
        line = {"group": name, "problems": len(part),
                "geomean": measure.geomean([r["ratio"] for r in timed]),
                "min": worst["ratio"] if worst else None,
                "min_problem": worst["problem"] if worst else None,
                "mismatches": sum(not r["ok"] for r in part), "target": None}
        if name == "all":
            values = {"geomean": line["geomean"], "min": line["min"]}
            line["target"] = {k: None if values[k] is None else values[k] >= bar
                              for k, bar in targets.items()}
        out.append(line)
    return out


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def target_line(line: dict, targets) -> str:
    """The verdict on issue 18's bar from the summary's "all" line."""
    bar = f">= {_x(targets['geomean'])} geomean, none slower than {_x(targets['min'])}"
    if line["target"] is None or None in line["target"].values():
        return f"target ({bar}): no problem timed"
    missed = [k for k, ok in line["target"].items() if not ok]
    verdict = "met" if not missed else "missed (" + ", ".join(missed) + ")"
    return (f"target ({bar}): {verdict}: geomean {_x(line['geomean'])}, min {_x(line['min'])} "
            f"({line['min_problem']}), {line['mismatches']} mismatches")


def markdown(result: dict) -> str:
    """The summary table, the target line and the per-problem table of one run."""
    lines = [
        f"GPU {result['gpu']} (L2 {result['l2_bytes'] / 2 ** 20:.0f} MiB), commit "
        f"{result['commit']}, {result['date']}; CuPy {result['cupy']}.  float32, mode reflect; "
        "x = cupyx.scipy.ndimage time / cupyconv.ndimage time (> 1: cupyconv faster), device "
        f"time of CUDA-graph replays over inputs rotated past {result['settings']['l2_factor']}x "
        "the L2 (or eager calls between events where marked, per side).  max rel = max |ours - cupyx| / "
        f"max |cupyx|, flagged above {result['settings']['tolerance']:.0e}.", "",
        target_line(result["summary"][0], result["targets"]), "",
        "| group | problems | geomean | min (problem) | mismatches |", "|---|---|---|---|---|"]
    for line in result["summary"]:
        lines.append(f"| {line['group']} | {line['problems']} | {_x(line['geomean'])} | "
                     f"{_x(line['min'])} ({line['min_problem'] or '—'}) | {line['mismatches']} |")
    lines += ["", "| problem | taps | ours ms | cupyx ms | x | ours GB/s | max rel | timing |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        err = f"{r['err']:.1e}" + ("" if r["ok"] else " **MISMATCH**")
        ours = f"{r['ours_ms']:.4f}"
        if "ours_events_ms" in r:
            ours += f" ({r['ours_events_ms']:.4f} eager)"
        lines.append(f"| {r['problem']} | {r['taps']} | {ours} | "
                     f"{r['cupyx_ms']:.4f} | {_x(r['ratio'])} | {r['GBps']:.0f} | {err} | "
                     f"{timing_label(r)} |")
    fallbacks = []
    for r in result["rows"]:
        why = r.get("graph_error")
        if isinstance(why, dict):
            fallbacks += [f"- {r['problem']}, {side}: {text}" for side, text in why.items()]
        elif why:
            fallbacks.append(f"- {r['problem']}: {why}")
    if fallbacks:
        lines += ["", "Timed as eager calls between events (graph capture failed); ratios "
                  "there compare our graph time with the peer's eager time, and our eager time "
                  "is shown in brackets:", *fallbacks]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    facts = measure.device_facts()
    plan = problems(args.ndims, args.ops, args.quick)
    progress(f"GPU {facts['gpu']} (L2 {facts['l2_bytes'] / 2 ** 20:.0f} MiB); CuPy "
             f"{facts['cupy']}; commit {git_commit()}; {len(plan)} problems")
    t0 = time.perf_counter()
    rows = []
    for i, problem in enumerate(plan, start=1):
        rows.append(measure_problem(problem, facts["l2_bytes"], args))
        progress(f"{i:3d}/{len(plan)} {row_line(rows[-1])}")
        measure.release_memory(None)
    result = {"benchmark": "ndimage", **facts, "python": platform.python_version(),
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "settings": {"dtype": DTYPE, "shapes": {str(n): list(s) for n, s in SHAPES.items()},
                           "mode": "reflect", "quick": args.quick, "repeat": args.repeat,
                           "target_ms": args.target_ms, "l2_factor": measure.L2_FACTOR,
                           "max_copies": measure.MAX_COPIES, "slow_ms": SLOW_MS,
                           "tolerance": TOLERANCE},
              "targets": args.targets, "rows": rows, "summary": summary(rows, args.targets),
              "seconds": time.perf_counter() - t0}
    text = markdown(result)
    path = write_results(result, args.out, results_stem("ndimage", facts["gpu"],
                                                        result["commit"], args.quick), text)
    print(text)
    print(target_line(result["summary"][0], args.targets))
    progress(f"{len(rows)} problems in {result['seconds']:.0f} s; wrote {path} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
