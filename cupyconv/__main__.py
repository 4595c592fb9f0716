"""Command line: ``python -m cupyconv {demo,compile-check}``."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cupyconv",
                                     description="cupyconv: GPU convolution for CuPy without cuDNN")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="convolve random data with every method, check and time it "
                                       "(without a GPU: run the compile check)")
    demo.add_argument("--repeat", type=int, default=20, help="timed runs per method (median)")
    sub.add_parser("compile-check", help="compile every kernel for NVIDIA (NVRTC) and AMD (HIPRTC) "
                                         "targets, without a GPU")
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.repeat < 1:
            parser.error("--repeat must be >= 1")
        from ._demo import run_demo

        return run_demo(repeat=args.repeat)
    from ._compile_check import main as check

    return check()


if __name__ == "__main__":
    sys.exit(main())
