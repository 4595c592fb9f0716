"""Command line: ``python -m cupyconv {demo,profile,compile-check}``."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    """The parser and its subparsers by name (tests parse with it without running anything)."""
    from cupyconv._cli import profile_args as _profile_args

    parser = argparse.ArgumentParser(prog="python -m cupyconv",
                                     description="cupyconv: GPU convolution for CuPy without cuDNN")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="convolve random data with every method, check and time it "
                                       "(without a GPU: run the compile check)")
    demo.add_argument("--repeat", type=int, default=20, help="timed runs per method (median)")
    profile = _profile_args.add_parser(sub)
    sub.add_parser("compile-check", help="compile every kernel for NVIDIA (NVRTC) and AMD (HIPRTC) "
                                         "targets, without a GPU")
    return parser, {"demo": demo, "profile": profile}


def main(argv=None) -> int:
    parser, subs = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.repeat < 1:
            subs["demo"].error("--repeat must be >= 1")
        from cupyconv._cli.demo import run_demo

        return run_demo(repeat=args.repeat)
    if args.command == "profile":
        from cupyconv._cli.profile_args import problem_from_args

        try:
            problem_from_args(args)  # every argument checked before anything touches the GPU
        except (ValueError, TypeError) as e:
            subs["profile"].error(str(e))
        from cupyconv._cli.profile import main as profile

        return profile(args)
    from cupyconv._cli.compile_check import main as check

    return check()


if __name__ == "__main__":
    sys.exit(main())
