"""Depthwise variants side by side: ``bench_depthwise_nets.py`` (a subset) once per variant, each
in a fresh process where the variant's Python statements ran first (module settings, a routing
function replaced), then one table of every layer's time per variant beside PyTorch's.

    python3 benchmarks/experiments/exp_depthwise_variants.py --out DIR \\
        --bench "--dtypes float16 --layouts NCHW --passes backward-weight" \\
        --variant "base=" \\
        --variant "rounds1=import cupyconv._depthwise.planes as P; P.PLANE_WGRAD_ROUNDS = 1"

Each variant's JSON goes to ``DIR/<name>/``.  Issue 48 (session 31) used it for channels-first
backward-weight on small planes; benchmarks/notes/depthwise.md has the runs.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (runs the variant's statements, then the benchmark, in this process)
WRAPPER = ("import sys, runpy; setup = sys.argv[1]; sys.argv = sys.argv[2:]; exec(setup); "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


def run(setup: str, bench_args: list[str], out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", WRAPPER, setup, "benchmarks/bench_depthwise_nets.py",
                    *bench_args, "--out", str(out)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    rows = json.loads(next(out.glob("depthwise-nets-*.json")).read_text())["rows"]
    return {(r["layer"], r["dtype"], r["layout"], p): v for r in rows
            for p, v in r["passes"].items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--bench", default="", help="bench_depthwise_nets.py arguments")
    parser.add_argument("--variant", action="append", required=True,
                        help="NAME=STATEMENTS (Python run before the benchmark; may be empty)")
    args = parser.parse_args(argv)
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp())
    results = {}
    for spec in args.variant:
        name, _, setup = spec.partition("=")
        print(f"variant {name}: {setup or '(as is)'}", file=sys.stderr, flush=True)
        results[name] = run(setup, shlex.split(args.bench), base / name)
    names = list(results)
    print("| layer | dtype | layout | pass | PyTorch ms | " + " | ".join(f"{n} ms (x)" for n in names)
          + " |")
    print("|---|---|---|---|---|" + "---|" * len(names))
    for key, first in results[names[0]].items():
        cells = [f"{results[n][key]['ours_ms']:.4f} ({results[n][key]['ratio']:.2f})"
                 for n in names if key in results[n]]
        print(f"| {' | '.join(key)} | {first['peer_ms']:.4f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
