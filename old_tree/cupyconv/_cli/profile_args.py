"""Command line of ``python -m cupyconv profile OP``: parsing and validation, no GPU needed.

The problem comes from the command line in the manner of composable_kernel's ckProfiler; every
check happens here, before anything is compiled or launched, and a bad argument exits with
status 2 and a message naming it (argparse's ``parser.error``).  The result is a
:class:`ProfileProblem` that :mod:`cupyconv._cli.profile` runs.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from cupyconv._core.geometry import (PADDING_MODES, ConvGeometry, normalize_output_padding,
                                     normalize_padding, per_dim, transpose_output_spatial)
from cupyconv._core.kernels import DTYPES

OPS = ("fwd", "bwd-data", "bwd-weight", "transpose", "separable", "signal")
CONV_DTYPES = DTYPES  # every kernel dtype
SIGNAL_DTYPES = ("float32", "float64", "complex64", "complex128")
VERIFY_HELP = "0: none, 1: float64 CPU reference (NumPy/SciPy), 2: float64 GPU reference"
INIT_HELP = "0: none (uninitialized memory, timing only), 1: small integers, 2: random decimals"
# Operations whose public function takes method=: the rest have one algorithm.
METHOD_OPS = ("fwd", "separable", "signal")
SIGNAL_METHODS = ("auto", "direct", "fft")


def _ints(text: str, name: str) -> tuple[int, ...]:
    """"3", "3,3" or "3x3" as a tuple of ints; a ValueError naming ``name`` otherwise."""
    parts = text.replace("x", ",").split(",")
    try:
        values = tuple(int(p) for p in parts if p.strip() != "")
    except ValueError:
        raise ValueError(f"{name} must be an integer or integers separated by ',' or 'x', "
                         f"got {text!r}") from None
    if not values:
        raise ValueError(f"{name} is empty")
    return values


def _per_dim(values: tuple[int, ...], ndim: int, name: str) -> tuple[int, ...]:
    if len(values) == 1:
        return values * ndim
    if len(values) != ndim:
        raise ValueError(f"{name} has {len(values)} values {values}, the problem has {ndim} "
                         f"spatial dims (--ndim)")
    return values


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``profile`` subcommand on an argparse subparsers object."""
    p = sub.add_parser(
        "profile", help="time one operation on a problem given on the command line, report "
                        "TFLOP/s, GB/s, fraction of the device ceilings, the algorithm and tile "
                        "that ran, and check the result",
        description="Profile one cupyconv operation (ckProfiler-style). Shapes: -N batch, -C "
                    "input channels, -K output channels, --input and --kernel sizes per spatial "
                    "dim ('56', '56,56' or '56x56'). signal takes only --input/--kernel (1-d or "
                    "2-d single arrays).",
        epilog="exit status: 0 done (and verified), 1 verification failed, 2 bad argument "
               "(nothing ran), 3 no GPU (CuPy sees no CUDA/ROCm device) or the operation is "
               "not available in this version")
    p.add_argument("op", choices=OPS, help="operation to profile")
    g = p.add_argument_group("problem")
    g.add_argument("--ndim", type=int, default=None, help="spatial dims (1-3; default: from "
                   "--input/--kernel, else 2)")
    g.add_argument("-N", "--batch", dest="batch", type=int, default=None, help="batch (8)")
    g.add_argument("-C", "--channels", dest="channels", type=int, default=None,
                   help="input channels (64)")
    g.add_argument("-K", "--out-channels", dest="out_channels", type=int, default=None,
                   help="output channels (64)")
    g.add_argument("--input", default=None, help="input spatial size per dim (56; signal: 4096)")
    g.add_argument("--kernel", default=None, help="kernel size per dim (3)")
    g.add_argument("--stride", default="1", help="stride per dim (1; '2' or '2,1')")
    g.add_argument("--dilation", default="1", help="dilation per dim (1)")
    g.add_argument("--pad", default=None, help="int, per-dim ints, or valid / same / same_lower")
    g.add_argument("--pad-lo", default=None, help="padding before each dim (asymmetric)")
    g.add_argument("--pad-hi", default=None, help="padding after each dim (asymmetric)")
    g.add_argument("--output-padding", default="0", help="transpose only")
    g.add_argument("--groups", type=int, default=1,
                   help="channel groups (1; = -C for depthwise)")
    g.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                   help="channels first (NCHW, default) or channels last (NHWC)")
    g.add_argument("--dtype", default="float32",
                   help=f"{'/'.join(CONV_DTYPES)}; signal: {'/'.join(SIGNAL_DTYPES)}")
    g.add_argument("--bias", action="store_true", help="add a bias (fwd, transpose, separable)")
    g.add_argument("--method", default="auto", help="fwd: auto or a forward algorithm; "
                   "separable: passed to separable_conv; signal: auto/direct/fft")
    g.add_argument("--mode", choices=("full", "valid", "same"), default="same",
                   help="signal only (scipy.signal mode)")
    g.add_argument("--signal-op", choices=("correlate", "convolve"), default="correlate",
                   help="signal only")
    r = p.add_argument_group("run")
    r.add_argument("--verify", type=int, choices=(0, 1, 2), default=1, help=VERIFY_HELP)
    r.add_argument("--init", type=int, choices=(0, 1, 2), default=2, help=INIT_HELP)
    r.add_argument("--repeat", type=int, default=20, help="timed samples (median)")
    r.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    r.add_argument("--ceilings", choices=("measure", "table"), default="measure",
                   help="device ceilings: measure now (once per process) or the table of known "
                        "devices (falls back to measuring)")
    r.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="write the result as JSON to PATH (stdout without PATH; the text "
                        "report then goes to stderr)")
    r.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress lines on stderr (default: when stderr is a terminal)")
    return p


@dataclass(frozen=True)
class ProfileProblem:
    """A validated profile request.  ``geom`` is the forward convolution behind every conv op
    (for transpose: the convolution whose backward-data pass it is; for separable: the depthwise
    part, with ``pointwise`` the 1x1 part); signal problems fill ``signal`` instead."""

    op: str
    dtype: str
    method: str
    verify: int
    init: int
    repeat: int
    warmup: int
    bias: bool
    geom: ConvGeometry | None = None
    options: dict = field(default_factory=dict)   # keyword arguments of the public call
    pointwise: ConvGeometry | None = None
    x_shape: tuple = ()                           # the operation's main input
    w_shape: tuple = ()
    signal: dict = field(default_factory=dict)    # in1, in2 shapes, mode, op


def _padding(args, ndim: int):
    """The --pad / --pad-lo / --pad-hi forms as one ``padding`` argument of the public API."""
    if args.pad is not None and (args.pad_lo is not None or args.pad_hi is not None):
        raise ValueError("give either --pad or --pad-lo/--pad-hi, not both")
    if args.pad_lo is not None or args.pad_hi is not None:
        lo = _per_dim(_ints(args.pad_lo or "0", "--pad-lo"), ndim, "--pad-lo")
        hi = _per_dim(_ints(args.pad_hi or "0", "--pad-hi"), ndim, "--pad-hi")
        return [(a, b) for a, b in zip(lo, hi)]
    if args.pad is None:
        return 0
    if args.pad.strip().lower() in PADDING_MODES:
        return args.pad.strip().lower()
    return _per_dim(_ints(args.pad, "--pad"), ndim, "--pad")


def _positive(value, name: str, default: int) -> int:
    value = default if value is None else value
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _ndim(args, default: int, limit: int) -> int:
    """--ndim, else the length of a multi-value --input or --kernel, else ``default``."""
    if args.ndim is not None:
        nd = args.ndim
    else:
        lengths = {n: len(_ints(v, n)) for v, n in ((args.input, "--input"),
                                                    (args.kernel, "--kernel")) if v is not None}
        multi = {n: k for n, k in lengths.items() if k > 1}
        if len(set(multi.values())) > 1:
            raise ValueError(f"--input has {multi['--input']} values and --kernel "
                             f"{multi['--kernel']}: give one per spatial dim, the same number")
        nd = max(multi.values(), default=default)
    if not 1 <= nd <= limit:
        raise ValueError(f"--ndim must be 1-{limit} for {args.op}, got {nd}")
    return nd


def problem_from_args(args) -> ProfileProblem:
    """Validate parsed arguments into a :class:`ProfileProblem` (ValueError on a bad one)."""
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    if args.verify and args.init == 0:
        raise ValueError("--verify 1/2 needs initialized inputs: use --init 1 or 2 (or --verify 0)")
    if args.op not in METHOD_OPS and args.method != "auto":
        raise ValueError(f"{args.op} has one algorithm; --method is for {', '.join(METHOD_OPS)}")
    common = dict(op=args.op, method=args.method, verify=args.verify, init=args.init,
                  repeat=args.repeat, warmup=args.warmup, bias=args.bias)
    if args.op == "signal":
        return _signal_problem(args, common)
    if args.dtype not in CONV_DTYPES:
        raise ValueError(f"--dtype must be one of {CONV_DTYPES} for {args.op}, got {args.dtype!r}")
    if args.op == "fwd":
        from cupyconv._dispatch.forward import forward_methods

        if args.method not in forward_methods():
            raise ValueError(f"--method must be one of {forward_methods()} for fwd, "
                             f"got {args.method!r}")
    if args.bias and args.op in ("bwd-data", "bwd-weight"):
        raise ValueError(f"--bias does not apply to {args.op}")
    if args.op != "transpose" and args.output_padding != "0":
        raise ValueError("--output-padding is for transpose only")
    nd = _ndim(args, 2, 3)
    n = _positive(args.batch, "-N", 8)
    c = _positive(args.channels, "-C", 64)
    k = _positive(args.out_channels, "-K", 64)
    spatial = _per_dim(_ints(args.input or "56", "--input"), nd, "--input")
    kernel = _per_dim(_ints(args.kernel or "3", "--kernel"), nd, "--kernel")
    stride = _per_dim(_ints(args.stride, "--stride"), nd, "--stride")
    dilation = _per_dim(_ints(args.dilation, "--dilation"), nd, "--dilation")
    padding = _padding(args, nd)
    cl = args.layout == "NHWC"

    def shape(lead, ch, sp):
        return (lead, *sp, ch) if cl else (lead, ch, *sp)

    opts = dict(stride=stride, padding=padding, dilation=dilation, layout=args.layout)
    if args.op == "separable":
        if args.groups != 1:
            raise ValueError("separable: the depthwise part has groups = C and the pointwise "
                             "part groups = 1; leave --groups out")
        dw = ConvGeometry.from_shapes(shape(n, c, spatial), shape(c, 1, kernel), groups=c,
                                      dtype=args.dtype, **opts)
        pw = ConvGeometry.from_shapes(dw.output_shape, shape(k, c, (1,) * nd), layout=args.layout,
                                      dtype=args.dtype)
        return ProfileProblem(dtype=args.dtype, geom=dw, pointwise=pw, options=opts,
                              x_shape=dw.input_shape, w_shape=dw.weight_shape, **common)
    opts["groups"] = args.groups
    if args.op == "transpose":
        return _transpose_problem(args, common, n, c, k, spatial, kernel, opts, shape)
    geom = ConvGeometry.from_shapes(shape(n, c, spatial), shape(k, c // max(args.groups, 1),
                                                                kernel),
                                    dtype=args.dtype, **opts)
    return ProfileProblem(dtype=args.dtype, geom=geom, options=opts, x_shape=geom.input_shape,
                          w_shape=geom.weight_shape, **common)


def _transpose_problem(args, common, n, c, k, spatial, kernel, opts, shape) -> ProfileProblem:
    """conv_transpose: -C input channels, -K output channels; weights (C, K/groups, *kernel)."""
    if isinstance(opts["padding"], str):
        raise ValueError("transpose takes --pad as ints or --pad-lo/--pad-hi, not "
                         f"{opts['padding']!r}")
    groups = args.groups
    if groups < 1 or c % groups or k % groups:
        raise ValueError(f"-C ({c}) and -K ({k}) must be divisible by --groups ({groups})")
    lo, hi = normalize_padding(opts["padding"], spatial, kernel, opts["stride"], opts["dilation"])
    nd = len(spatial)
    out_pad = normalize_output_padding(_per_dim(_ints(args.output_padding, "--output-padding"),
                                                nd, "--output-padding"),
                                       per_dim(opts["stride"], nd, "stride", 1),
                                       per_dim(opts["dilation"], nd, "dilation", 1))
    out_spatial = transpose_output_spatial(spatial, kernel, opts["stride"], opts["dilation"], lo,
                                           hi, out_pad)
    if min(out_spatial) < 1:
        raise ValueError(f"the padding leaves an empty output (size {out_spatial})")
    w_shape = shape(c, k // groups, kernel)
    # The forward convolution this is the backward-data pass of (as conv_transpose builds it).
    geom = ConvGeometry.from_shapes(shape(n, k, out_spatial), w_shape, stride=opts["stride"],
                                    padding=list(zip(lo, hi)), dilation=opts["dilation"],
                                    groups=groups, layout=args.layout, dtype=args.dtype)
    opts = dict(opts, padding=list(zip(lo, hi)), output_padding=out_pad)
    return ProfileProblem(dtype=args.dtype, geom=geom, options=opts, x_shape=shape(n, c, spatial),
                          w_shape=w_shape, **common)


def _signal_problem(args, common) -> ProfileProblem:
    given = [flag for flag, v in (("-N", args.batch), ("-C", args.channels),
                                  ("-K", args.out_channels)) if v is not None]
    if given or args.groups != 1 or args.layout != "NCHW" or args.bias:
        raise ValueError("signal works on one array and one kernel: give --input and --kernel "
                         "only (no -N/-C/-K, --groups, --layout, --bias)")
    if (args.stride, args.dilation) != ("1", "1") or args.pad or args.pad_lo or args.pad_hi:
        raise ValueError("signal has --mode instead of --stride/--dilation/--pad")
    if args.dtype not in SIGNAL_DTYPES:
        raise ValueError(f"--dtype must be one of {SIGNAL_DTYPES} for signal, got {args.dtype!r}")
    if args.method not in SIGNAL_METHODS:
        raise ValueError(f"--method must be one of {SIGNAL_METHODS} for signal, got "
                         f"{args.method!r}")
    nd = _ndim(args, 2, 2)
    in1 = _per_dim(_ints(args.input or "4096", "--input"), nd, "--input")
    in2 = _per_dim(_ints(args.kernel or "3", "--kernel"), nd, "--kernel")
    if min(in1 + in2) < 1:
        raise ValueError(f"--input and --kernel sizes must be >= 1, got {in1} and {in2}")
    if args.mode == "valid" and not (all(a >= b for a, b in zip(in1, in2))
                                     or all(a <= b for a, b in zip(in1, in2))):
        raise ValueError("mode 'valid' needs one array at least as large as the other in every "
                         "dim (scipy.signal)")
    out = tuple({"full": a + b - 1, "same": a, "valid": abs(a - b) + 1}[args.mode]
                for a, b in zip(in1, in2))
    return ProfileProblem(dtype=args.dtype, x_shape=in1, w_shape=in2,
                          signal={"in1": in1, "in2": in2, "mode": args.mode, "op": args.signal_op,
                                  "out": out, "macs": math.prod(out) * math.prod(in2)},
                          **common)
