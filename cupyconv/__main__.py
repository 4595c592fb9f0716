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
                                       "(without a GPU: compile a sample of the kernels, as "
                                       "compile-check --sample)",
                          epilog="exit status: 0 every result matched (or, without a GPU, the "
                                 "sample compiled), 1 a result or compile failed")
    demo.add_argument("--repeat", type=int, default=20, help="timed runs per method (median)")
    profile = _profile_args.add_parser(sub)
    check = sub.add_parser(
        "compile-check", help="compile every kernel for NVIDIA (NVRTC) and AMD (HIPRTC, clang) "
                              "targets, without a GPU",
        description="Compile every registered kernel module for NVIDIA sm_80/sm_90a (NVRTC) and "
                    "AMD gfx90a/gfx908/gfx1030 (HIPRTC), and a sample of them (one instantiation "
                    "per kernel, dtype class and GEMM loop; all with "
                    "CUPYCONV_COMPILE_CHECK_CLANG=full) for gfx942/gfx1100/gfx1201 (+ gfx950 where "
                    "the installed clang knows it) (clang -x hip), without a GPU.  Successful "
                    "compiles are cached by a hash of source, options, target and compiler in "
                    "~/.cache/cupyconv/compile-check ($CUPYCONV_COMPILE_CHECK_CACHE; 'off': no "
                    "cache).",
        epilog="exit status: 0 every compile passed, 1 a compile failed (or, with "
               "CUPYCONV_REQUIRE_COMPILERS=1, a compiler is missing)")
    check.add_argument("--report", action="store_true",
                       help="instead: per-kernel VGPR/AGPR/SGPR, LDS, scratch and spill counts for "
                            "gfx90a and gfx942 (needs clang-19)")
    check.add_argument("--modules", default=None, metavar="PATTERNS",
                       help="comma-separated fnmatch patterns of kernel sources, e.g. "
                            "'gemm/*,common/copy.cu' (default: $CUPYCONV_COMPILE_CHECK_MODULES, "
                            "else all)")
    check.add_argument("--no-cache", action="store_true",
                       help="compile everything again and record nothing")
    check.add_argument("--sample", action="store_true",
                       help="only a representative sample, as the demo without a GPU: one "
                            "instantiation per kernel source, kernel, dtype class and GEMM main "
                            "loop, for sm_80, sm_90a and one AMD target where a compiler is "
                            "installed (a minute or two on two cores)")
    return parser, {"demo": demo, "profile": profile, "compile-check": check}


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
    from cupyconv._cli import compile_cache, compile_check

    try:
        compile_check.select_modules(args.modules)
    except ValueError as e:
        subs["compile-check"].error(str(e))
    if args.no_cache:
        import os

        os.environ[compile_cache.CACHE_ENV] = "off"
    if args.report:
        from cupyconv._cli.amd_report import report_main

        return report_main(modules=args.modules)
    if args.sample:
        return compile_check.sample_main(modules=args.modules)
    return compile_check.main(modules=args.modules)


if __name__ == "__main__":
    sys.exit(main())
