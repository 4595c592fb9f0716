"""Cold start of a network's forward pass (issue 47): what the first pass costs with and without
``cupyconv.jit.precompile``, from an empty and from a filled disk cache.

    python3 benchmarks/bench_cold.py [--network resnet50] [--batch 1] [--dtype float32]
        [--layout NCHW] [--workers N] [--out DIR]

Each measurement runs in a fresh process (nothing in memory) with its own kernel caches
(``CUPY_CACHE_DIR`` and ``CUPYCONV_CACHE_DIR`` in a temporary directory):

- ``first_call``: empty caches; the first pass compiles each module as a call reaches it;
- ``precompile``: empty caches; ``cupyconv.jit.precompile(problems=<the layers>)`` (its modules
  found without compiling, then compiled on ``--workers`` threads), then the first pass;
- ``disk``: the caches ``first_call`` filled; the first pass loads every module from disk;
- ``disk_precompile``: those caches again; precompile (loading on the threads), then the pass.

Each prints seconds for precompile (where run), the first pass and a second (warm) pass, and
the number of modules and their summed compile (or load) time from ``jit.cache_info()``.
Writes ``cold-<gpu>-<commit>.json`` into ``--out`` (default: print only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from networks import NETWORKS  # noqa: E402

MODES = ("first_call", "precompile", "disk", "disk_precompile")


def problems(layers, batch: int, dtype: str, layout: str) -> list[dict]:
    """The layers as ``cupyconv.jit.precompile`` problems (the calls cupyconv_pass makes)."""
    return [dict(x=layer.input_shape(batch, layout), w=layer.weight_shape(layout),
                 stride=layer.stride, padding=layer.padding, groups=layer.groups, layout=layout,
                 dtype=dtype) for layer in layers]


def child(args) -> dict:
    """One measurement in this (fresh) process: see the module docstring."""
    import cupy

    import cupyconv

    layers = NETWORKS[args.network]()
    todo = problems(layers, args.batch, args.dtype, args.layout)
    rng = cupy.random.default_rng(0)
    operands = [(rng.uniform(-1, 1, p["x"], dtype=cupy.float32).astype(args.dtype),
                 rng.uniform(-1, 1, p["w"], dtype=cupy.float32).astype(args.dtype))
                for p in todo]
    cupy.cuda.Device().synchronize()

    def one_pass():
        start = time.perf_counter()
        for p, (x, w) in zip(todo, operands):
            cupyconv.conv(x, w, stride=p["stride"], padding=p["padding"], groups=p["groups"],
                          layout=p["layout"])
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - start

    row = {"mode": args.child, "precompile_s": None}
    if args.child.endswith("precompile"):
        start = time.perf_counter()
        row["precompiled_modules"] = cupyconv.jit.precompile(problems=todo, workers=args.workers)
        row["precompile_s"] = time.perf_counter() - start
    row["first_pass_s"] = one_pass()
    row["second_pass_s"] = one_pass()
    info = cupyconv.jit.cache_info()
    row["modules"] = len(info["modules"])
    row["module_seconds"] = sum(m["seconds"] for m in info["modules"])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="resnet50", choices=sorted(NETWORKS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    parser.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"))
    parser.add_argument("--workers", type=int, default=None,
                        help="precompile's threads (default: one per CPU)")
    parser.add_argument("--out", default=None, help="directory for the JSON result")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="cupyconv-cold-") as tmp:
        for mode in MODES:
            cache = Path(tmp) / ("filled" if mode in ("first_call", "disk", "disk_precompile")
                                 else mode)
            env = dict(os.environ, CUPY_CACHE_DIR=str(cache / "cupy"),
                       CUPYCONV_CACHE_DIR=str(cache / "cupyconv"))
            env.pop("CUPYCONV_AUTOTUNE", None)
            cmd = [sys.executable, __file__, "--child", mode, "--network", args.network,
                   "--batch", str(args.batch), "--dtype", args.dtype, "--layout", args.layout]
            if args.workers:
                cmd += ["--workers", str(args.workers)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                return 1
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            pre = f"precompile {row['precompile_s']:.2f} s, " if row["precompile_s"] else ""
            print(f"{args.network} batch {args.batch} {args.dtype} {args.layout} {mode:16s} "
                  f"{pre}first pass {row['first_pass_s']:.2f} s, second "
                  f"{row['second_pass_s'] * 1e3:.1f} ms; {row['modules']} modules, "
                  f"{row['module_seconds']:.2f} s in their compiles/loads", flush=True)
    if args.out:
        import cupy

        from bench import git_commit

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        name = (name.decode() if isinstance(name, bytes) else name).replace(" ", "_")
        path = Path(args.out) / f"cold-{name}-{git_commit()}.json"
        path.write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "rows": rows},
                                   indent=1))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
