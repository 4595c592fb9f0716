"""``python -m cupyconv profile OP``: run one operation on one problem, time it, judge it.

Reports the device time (median of CUDA-event samples), TFLOP/s and GB/s with their fractions of
the device ceilings (``_ceilings``), the algorithm and the GEMM tile configurations that really ran
(recorded at launch), and the verification verdict: ``--verify 1`` against the float64 CPU
reference, ``--verify 2`` against a float64 GPU reference that avoids the code path under test.
The demo and the tests use :func:`evaluate` and :func:`verdict` too, so every entry point judges
results the same way.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import numpy as np

from cupyconv._cli.profile_args import ProfileProblem
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.verify import TOLERANCE, rel_error, tolerance

REFERENCES = {1: "float64 CPU reference (NumPy/SciPy)", 2: "float64 GPU reference"}


class Progress:
    """Progress lines on stderr for long runs (compile, references, timing samples)."""

    def __init__(self, enabled: bool, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.t0 = time.perf_counter()

    def stage(self, message: str) -> None:
        if self.enabled:
            print(f"[{time.perf_counter() - self.t0:6.1f} s] {message}", file=self.stream,
                  flush=True)

    def sample(self, i: int, n: int, ms: float) -> None:
        """One timing sample: rewritten in place on a terminal, every 10th line otherwise."""
        if not self.enabled:
            return
        line = f"[{time.perf_counter() - self.t0:6.1f} s] timing {i}/{n}: {ms:.4f} ms"
        if self.tty:
            print("\r" + line, end="\n" if i == n else "", file=self.stream, flush=True)
        elif i == n or i % 10 == 0:
            print(line, file=self.stream, flush=True)


def tolerance_for(dtype: str, ref) -> float:
    """:func:`_verify.tolerance`, with complex dtypes judged like their real parts."""
    if dtype.startswith("complex"):
        return TOLERANCE["float32" if dtype == "complex64" else "float64"]
    return tolerance(dtype, ref)


def verdict(out, ref, dtype: str) -> dict:
    """{"error", "tolerance", "passed"}: relative error of ``out`` against a float64 ``ref``."""
    if numpy_dtype(dtype).kind == "c":
        out_h = np.asarray(out.get() if hasattr(out, "get") else out)
        ref_h = np.asarray(ref.get() if hasattr(ref, "get") else ref)
        denom = np.linalg.norm(ref_h.ravel()) or 1.0
        err = float(np.linalg.norm((out_h.astype(np.complex128) - ref_h).ravel()) / denom)
        if not np.all(np.isfinite(out_h)):
            err = float("inf")
    else:
        err = rel_error(out, ref)
    tol = tolerance_for(dtype, ref)
    return {"error": err, "tolerance": tol, "passed": bool(err <= tol)}


def _launch_summary(log) -> list[dict]:
    """Recorded GEMM launches, identical ones merged with a count."""
    counts = Counter((kernel, shape, plan.tile, plan.splits) for kernel, shape, plan in log)
    return [{"kernel": kernel, "m": shape[0], "n": shape[1], "k": shape[2], "batch": shape[3],
             "tile": list(tile), "splits": splits, "count": count}
            for (kernel, shape, tile, splits), count in counts.items()]


def evaluate(fn, *, repeat: int = 20, warmup: int = 3, progress: Progress | None = None) -> dict:
    """Run ``fn`` once with the GEMM launches recorded, then time it: {"result", "launches", "ms"}."""
    import cupy

    from cupyconv._gemm.launch import record_plans

    with record_plans() as log:
        result = fn()
    cupy.cuda.Device().synchronize()
    ms = _time(fn, repeat, warmup, progress)
    return {"result": result, "launches": _launch_summary(log), "ms": ms}


def _time(fn, repeat, warmup, progress):
    from cupyconv._core.timing import time_gpu

    on_sample = progress.sample if progress is not None and progress.enabled else None
    return time_gpu(fn, warmup=warmup, repeat=repeat, on_sample=on_sample)


def run_profile(prob: ProfileProblem, *, ceilings_mode: str = "measure",
                progress: Progress | None = None) -> dict:
    """Profile ``prob`` on the current device; the JSON-serializable result."""
    import cupy

    from cupyconv._cli.ceilings import ceilings
    from cupyconv._cli.profile_ops import build
    from cupyconv._core.version import __version__

    progress = progress or Progress(False)
    progress.stage(f"{prob.op}: preparing inputs (init {prob.init})")
    op = build(prob, np.random.default_rng(0))
    progress.stage("first call (compiles the kernels it needs on first use)")
    run = evaluate(op.call, repeat=prob.repeat, warmup=prob.warmup, progress=progress)
    progress.stage("device ceilings")
    ceil = ceilings(prob.dtype, measure=ceilings_mode == "measure")
    seconds = run["ms"] * 1e-3
    flops_frac, bw_frac = ceil.fractions(op.flops, op.nbytes, seconds)
    result = {
        "cupyconv": __version__, "op": prob.op, "device": ceil.device, "dtype": prob.dtype,
        "layout": prob.geom.layout if prob.geom is not None else None,
        "method": prob.method, "shapes": {k: list(v) for k, v in op.shapes.items()},
        "options": _jsonable(prob.options), "algorithm": op.algorithm,
        "launches": run["launches"], "ms": run["ms"], "repeat": prob.repeat,
        "tflops": op.flops / seconds / 1e12, "gbps": op.nbytes / seconds / 1e9,
        "gflop": op.flops / 1e9, "mbytes": op.nbytes / 1e6,
        "ceilings": {"tflops": ceil.flops / 1e12, "gbps": ceil.bandwidth / 1e9,
                     "source": ceil.source},
        "fraction_of_ceiling": {"flops": flops_frac, "bandwidth": bw_frac},
        "verify": {"mode": prob.verify},
    }
    if prob.verify:
        progress.stage(f"verifying against the {REFERENCES[prob.verify]}")
        t = time.perf_counter()
        ref = op.cpu_reference() if prob.verify == 1 else op.gpu_reference()
        result["verify"].update(verdict(run["result"], ref, prob.dtype),
                                reference=REFERENCES[prob.verify],
                                reference_s=time.perf_counter() - t)
    cupy.cuda.Device().synchronize()
    progress.stage("done")
    return result


def _jsonable(v):
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def format_report(r: dict) -> str:
    """The human-readable report of a :func:`run_profile` result."""
    algo = r["algorithm"]
    lines = [f"cupyconv {r['cupyconv']} profile {r['op']} on {r['device']} ({r['dtype']}"
             + (f", {r['layout']}" if r["layout"] else "") + ")"]
    lines.append("problem    " + "  ".join(f"{k} {tuple(v)}" for k, v in r["shapes"].items()))
    if r["options"]:
        lines.append("options    " + "  ".join(f"{k}={v}" for k, v in r["options"].items()
                                               if k != "layout"))
    lines.append(f"algorithm  {algo.get('algorithm')}"
                 + (" (tuned)" if algo.get("tuned") else "")
                 + (f": {algo['description']}" if algo.get("description") else ""))
    for launch in r["launches"]:
        tile = launch["tile"]
        lines.append(f"  gemm     {launch['kernel']} m={launch['m']} n={launch['n']} "
                     f"k={launch['k']} batch={launch['batch']}: tile {tile[0]}x{tile[1]}x{tile[2]}"
                     f" (thread {tile[3]}x{tile[4]}), split-K {launch['splits']}"
                     + (f"  x{launch['count']}" if launch["count"] > 1 else ""))
    c, f = r["ceilings"], r["fraction_of_ceiling"]
    lines.append(f"time       {r['ms']:.4f} ms (median of {r['repeat']} samples)")
    lines.append(f"compute    {r['tflops']:.2f} TFLOP/s = {100 * f['flops']:.1f} % of "
                 f"{c['tflops']:.1f} (cuBLAS {r['dtype']} matmul, {c['source']})  "
                 f"[{r['gflop']:.3f} GFLOP]")
    lines.append(f"memory     {r['gbps']:.1f} GB/s = {100 * f['bandwidth']:.1f} % of "
                 f"{c['gbps']:.0f} (device copy, {c['source']})  [{r['mbytes']:.2f} MB moved at "
                 f"least]")
    v = r["verify"]
    if v["mode"] == 0:
        lines.append("verify     skipped (--verify 0)")
    else:
        lines.append(f"verify     {v['reference']}: error {v['error']:.2e} "
                     f"{'<=' if v['passed'] else '>'} tolerance {v['tolerance']:.1e}: "
                     f"{'PASS' if v['passed'] else 'FAIL'}  (reference {v['reference_s']:.2f} s)")
    return "\n".join(lines)


def main(args) -> int:
    """Entry of the ``profile`` subcommand with parsed, already validated-by-argparse args."""
    from cupyconv._cli.profile_args import problem_from_args
    from cupyconv._cli.profile_ops import MissingOperation
    from cupyconv._core.timing import gpu_available

    prob = problem_from_args(args)  # ValueError: reported by the caller as a usage error
    if not gpu_available():
        print("cupyconv profile: no GPU (cupy.is_available() is False); profiling needs a CUDA "
              "or ROCm device", file=sys.stderr)
        return 3
    enabled = args.progress if args.progress is not None else sys.stderr.isatty()
    try:
        result = run_profile(prob, ceilings_mode=args.ceilings, progress=Progress(enabled))
    except MissingOperation as e:
        print(f"cupyconv profile: {e}", file=sys.stderr)
        return 3
    text = format_report(result)
    if args.json is None:
        print(text)
    else:
        payload = json.dumps(result, indent=1)
        if args.json == "-":
            print(text, file=sys.stderr)
            print(payload)
        else:
            print(text)
            with open(args.json, "w") as fh:
                fh.write(payload + "\n")
    return 0 if result["verify"].get("passed", True) else 1
