"""Issue 48: channels-first 16-bit backward-weight on small planes, on its own plane kernel or
through channels-last copies and the channels-last kernel (``cupyconv._depthwise.launch.
STAGE_WGRAD_CL``, off by default)?

    python3 benchmarks/experiments/exp_wgrad_staged.py [--out DIR] [--max-pixels 196]

Runs ``bench_depthwise_nets.py`` (MobileNetV2 and EfficientNet-B0 layers, fp16 and bf16 NCHW,
backward-weight) twice in fresh processes, the switch off and on (``--max-pixels``: the largest
output plane that stages), and prints each layer's time both ways beside PyTorch's; the two JSONs
go into ``--out`` (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ["benchmarks/bench_depthwise_nets.py", "--nets", "mobilenetv2,efficientnet_b0",
         "--dtypes", "float16,bfloat16", "--layouts", "NCHW", "--passes", "backward-weight"]
# (runs the benchmark with the switch set, in a process of its own)
WRAPPER = ("import sys, runpy; on, pixels = sys.argv[1] == '1', int(sys.argv[2]); "
           "sys.argv = sys.argv[3:]; import cupyconv._depthwise.launch as L; "
           "L.STAGE_WGRAD_CL = on; L.STAGE_WGRAD_MAX_PIXELS = pixels; "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


def run(on: bool, pixels: int, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", WRAPPER, str(int(on)), str(pixels), *BENCH,
                    "--out", str(out)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    path = next(out.glob("depthwise-nets-*.json"))
    return {(r["layer"], r["dtype"]): r["passes"]["backward-weight"]
            for r in json.loads(path.read_text())["rows"] if r["family"] == "depthwise"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--max-pixels", type=int, default=14 * 14)
    args = parser.parse_args(argv)
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp())
    off = run(False, args.max_pixels, base / "plane")
    on = run(True, args.max_pixels, base / "staged")
    print("| layer | dtype | plane kernel ms | staged ms | PyTorch ms | x plane | x staged |")
    print("|---|---|---|---|---|---|---|")
    for key in off:
        a, b = off[key], on[key]
        print(f"| {key[0]} | {key[1]} | {a['ours_ms']:.4f} | {b['ours_ms']:.4f} | "
              f"{a['peer_ms']:.4f} | {a['ratio']:.2f} | {b['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
