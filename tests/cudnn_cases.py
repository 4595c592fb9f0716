"""Bad-argument calls of ``cupyconv.cudnn`` and the CuPy 13 arguments their errors must name
(issue 45 class 4): one list that two tests drive, tests/api/test_compat.py on the CPU (arrays
faked with NumPy, the launch replaced by a sentinel) and tests/api/test_gpu_compat.py on a GPU.

Each case changes one thing of a valid call (:func:`base`) and names the exception and the CuPy
13 arguments (``x``, ``W``, ``b``, ``y``, ``gy``, ``gW``, ``pad``, ``stride``, ``dilation``,
``groups``, ``d_layout``, ``w_layout``, ``tensor_core``) its message must contain; no message
may contain one of cupyconv's own names (:data:`INTERNAL`).  In ``convolution_backward_data(W,
x, b, y, ...)`` ``x`` is the gradient of the forward output and ``y`` the gradient of its input
(written); in ``convolution_backward_filter(x, gy, gW, ...)`` ``gy`` is the output's gradient and
``gW`` the result.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

# cupyconv's names for arguments and shape roles: none may reach a cupyconv.cudnn message
INTERNAL = ("out", "w", "bias", "dy", "dx", "dw", "padding", "layout", "input_shape",
            "weight_shape", "input", "weight", "method", "precision", "z")

# the array each function writes
OUTPUT = {"forward": "y", "backward_data": "y", "backward_filter": "gW"}


class Arrays:
    """Arrays for the cases, made by ``new(shape, dtype, fill)`` (NumPy fakes or CuPy);
    ``device(i)`` is a context in which ``new`` makes arrays on device ``i``."""

    def __init__(self, new: Callable, device: Callable, host: Callable):
        self.new, self.device, self.to_host = new, device, host

    def zeros(self, shape, dtype="float32"):
        if dtype == "bfloat16":
            import ml_dtypes

            return self.new(shape, "float32", 0).astype(ml_dtypes.bfloat16)
        return self.new(shape, dtype, 0)

    def out(self, shape, dtype="float32"):
        """An output to be written: NaN (7 for integers), so that a write would show."""
        return self.new(shape, dtype, 7 if np.dtype(dtype).kind in "iu" else np.nan)

    def strided(self, shape, dtype="float32"):
        """A non-contiguous output (every other element of its last dim)."""
        return self.out(tuple(shape[:-1]) + (2 * shape[-1],), dtype)[..., ::2]

    def host(self, shape, dtype="float32"):
        return np.zeros(shape, dtype)

    def on_device(self, device: int, shape, dtype="float32"):
        with self.device(device):
            return self.zeros(shape, dtype)

    def overlapping(self, shape_a, shape_b, dtype="float32"):
        """Two C-contiguous views of one buffer, ``b`` starting at ``a``'s last element."""
        na, nb = math.prod(shape_a), math.prod(shape_b)
        buf = self.out((na + nb - 1,), dtype)
        return buf[:na].reshape(shape_a), buf[na - 1:].reshape(shape_b)


def base(function: str, a: Arrays) -> dict:
    """A valid call of ``function`` ("forward", "backward_data", "backward_filter"): 2-d, NCHW,
    groups 2, 4 -> 6 channels, 3x3 filter, padding 1."""
    options = dict(pad=(1, 1), stride=(1, 1), dilation=(1, 1), groups=2, tensor_core="auto",
                   d_layout=0, w_layout=0)
    if function == "forward":
        return dict(x=a.zeros((2, 4, 9, 9)), W=a.zeros((6, 2, 3, 3)), b=a.zeros((6,)),
                    y=a.out((2, 6, 9, 9)), **options)
    if function == "backward_data":
        return dict(W=a.zeros((6, 2, 3, 3)), x=a.zeros((2, 6, 9, 9)), b=a.zeros((4,)),
                    y=a.out((2, 4, 9, 9)), **options)
    return dict(x=a.zeros((2, 4, 9, 9)), gy=a.zeros((2, 6, 9, 9)), gW=a.out((6, 2, 3, 3)),
                **options)


def call(function: str, args: dict):
    """``cupyconv.cudnn``'s ``function`` with ``args`` (CuPy 13's names), positional as CuPy 13's
    callers pass them."""
    from cupyconv import cudnn

    options = [args[k] for k in ("pad", "stride", "dilation", "groups")]
    kw = dict(auto_tune=False, tensor_core=args["tensor_core"], d_layout=args["d_layout"],
              w_layout=args["w_layout"])
    if function == "forward":
        return cudnn.convolution_forward(args["x"], args["W"], args["b"], args["y"], *options,
                                         **kw)
    if function == "backward_data":
        return cudnn.convolution_backward_data(args["W"], args["x"], args["b"], args["y"],
                                               *options, deterministic=False, **kw)
    return cudnn.convolution_backward_filter(args["x"], args["gy"], args["gW"], *options,
                                             deterministic=True, **kw)


@dataclass(frozen=True)
class Case:
    function: str
    name: str
    error: type
    names: tuple            # CuPy 13 arguments the message must name
    change: Callable        # change(arrays) -> the arguments replaced in base()
    gpus: int = 1           # devices the case needs

    @property
    def id(self) -> str:
        return f"{self.function}-{self.name}"

    def arguments(self, a: Arrays) -> dict:
        return {**base(self.function, a), **self.change(a)}


def check_message(message: str, case: Case) -> None:
    """The message names each of ``case.names`` and none of cupyconv's own names (as words,
    case-sensitive: ``W`` is CuPy 13's, ``w`` cupyconv's)."""
    for name in case.names:
        assert re.search(rf"\b{re.escape(name)}\b", message), (
            f"{case.id}: the message does not name {name!r}: {message}")
    for name in INTERNAL:
        assert not re.search(rf"\b{re.escape(name)}\b", message), (
            f"{case.id}: the message names cupyconv's {name!r}: {message}")


def _nhwc(a):  # the forward problem of base() channels-last (filter NHWC too)
    return dict(x=a.zeros((2, 9, 9, 4)), W=a.zeros((6, 3, 3, 2)), y=a.out((2, 9, 9, 6)),
                d_layout=1, w_layout=1)


def _forward_cases():
    V, T = ValueError, TypeError
    big = 2 ** 30 - 10  # padding that leaves every extent below 2**31 and y over 2**48 bytes
    rows = [
        ("y-shape", V, ("y",), lambda a: dict(y=a.out((2, 6, 9, 8)))),
        ("y-dtype", T, ("y",), lambda a: dict(y=a.out((2, 6, 9, 9), "float64"))),
        ("y-strided-shape", V, ("y",), lambda a: dict(y=a.strided((2, 6, 9, 8)))),
        ("y-strided-dtype", T, ("y",), lambda a: dict(y=a.strided((2, 6, 9, 9), "float64"))),
        ("y-ndim", V, ("y", "W"), lambda a: dict(y=a.out((2, 6, 81)))),
        ("y-host", T, ("y",), lambda a: dict(y=a.host((2, 6, 9, 9)))),
        ("y-too-large", V, ("y",), lambda a: dict(pad=(big, big))),
        ("y-overlaps-x", V, ("y", "x"),
         lambda a: dict(zip(("x", "y"), a.overlapping((2, 4, 9, 9), (2, 6, 9, 9))))),
        ("y-overlaps-W", V, ("y", "W"),
         lambda a: dict(zip(("W", "y"), a.overlapping((6, 2, 3, 3), (2, 6, 9, 9))))),
        ("y-overlaps-b", V, ("y", "b"),
         lambda a: dict(zip(("b", "y"), a.overlapping((6,), (2, 6, 9, 9))))),
        ("x-unbatched", V, ("x", "W"), lambda a: dict(x=a.zeros((4, 9, 9)))),
        ("x-host", T, ("x",), lambda a: dict(x=a.host((2, 4, 9, 9)))),
        ("x-int", T, ("x",), lambda a: dict(x=a.zeros((2, 4, 9, 9), "int32"))),
        ("x-empty", V, ("x",), lambda a: dict(x=a.zeros((2, 4, 0, 9)))),
        ("x-channels-groups", V, ("x", "groups"), lambda a: dict(x=a.zeros((2, 5, 9, 9)))),
        ("W-ndim", V, ("W",), lambda a: dict(W=a.zeros((6, 18)))),
        ("W-host", T, ("W",), lambda a: dict(W=a.host((6, 2, 3, 3)))),
        ("W-dtype", T, ("W", "x"), lambda a: dict(W=a.zeros((6, 2, 3, 3), "float64"))),
        ("W-bfloat16", T, ("W", "x"), lambda a: dict(W=a.zeros((6, 2, 3, 3), "bfloat16"))),
        ("W-channels", V, ("W", "d_layout", "x"), lambda a: dict(W=a.zeros((6, 3, 3, 3)))),
        ("W-out-channels-groups", V, ("W", "groups"),
         lambda a: dict(W=a.zeros((5, 2, 3, 3)), b=a.zeros((5,)))),
        ("W-other-device", V, ("W", "x", "y"),
         lambda a: dict(W=a.on_device(1, (6, 2, 3, 3))), 2),
        ("b-shape", V, ("b",), lambda a: dict(b=a.zeros((5,)))),
        ("b-dtype", T, ("b", "x"), lambda a: dict(b=a.zeros((6,), "float64"))),
        ("b-host", T, ("b",), lambda a: dict(b=a.host((6,)))),
        ("b-other-device", V, ("b", "x"), lambda a: dict(b=a.on_device(1, (6,))), 2),
        ("groups-0", V, ("groups",), lambda a: dict(groups=0)),
        ("groups-float", T, ("groups",), lambda a: dict(groups=2.0)),
        ("pad-negative", V, ("pad",), lambda a: dict(pad=(1, -1))),
        ("pad-length", V, ("pad",), lambda a: dict(pad=(1, 1, 1))),
        ("pad-pair", V, ("pad",), lambda a: dict(pad=((1, 1, 1), (1, 1)))),
        ("pad-float", T, ("pad",), lambda a: dict(pad=(1.5, 1))),
        ("pad-mode", V, ("pad",), lambda a: dict(pad="full")),
        ("pad-2**31", V, ("pad",), lambda a: dict(pad=(2 ** 31, 0))),
        ("stride-0", V, ("stride",), lambda a: dict(stride=(0, 1))),
        ("stride-length", V, ("stride",), lambda a: dict(stride=(1, 1, 1))),
        ("stride-float", T, ("stride",), lambda a: dict(stride=(1, 1.5))),
        ("dilation-0", V, ("dilation",), lambda a: dict(dilation=(1, 0))),
        ("kernel-larger-than-padded-x", V, ("x", "dilation", "pad"),
         lambda a: dict(pad=(0, 0), dilation=(6, 1))),
        ("tensor_core", V, ("tensor_core",), lambda a: dict(tensor_core="fast")),
        ("d_layout", V, ("d_layout",), lambda a: dict(d_layout=2)),
        ("w_layout", V, ("w_layout",), lambda a: dict(w_layout="NHWC")),
        ("nhwc-y-shape", V, ("y",), lambda a: {**_nhwc(a), "y": a.out((2, 6, 9, 9))}),
        ("nhwc-W-channels", V, ("W", "d_layout"),
         lambda a: {**_nhwc(a), "W": a.zeros((6, 3, 3, 3))}),
        # W in NCHW order for NHWC data: read through a view, which the message says
        ("nhwc-W-nchw-channels", V, ("W", "w_layout", "d_layout"),
         lambda a: {**_nhwc(a), "W": a.zeros((6, 3, 3, 3)), "w_layout": 0}),
        ("1d-y-shape", V, ("y",),
         lambda a: dict(x=a.zeros((2, 4, 9)), W=a.zeros((6, 2, 3)), y=a.out((2, 6, 8)),
                        pad=(1,), stride=(1,), dilation=(1,))),
        ("3d-x-unbatched", V, ("x", "W"),
         lambda a: dict(x=a.zeros((4, 5, 5, 5)), W=a.zeros((6, 2, 3, 3, 3)),
                        y=a.out((2, 6, 5, 5, 5)), pad=1, stride=1, dilation=None)),
        ("complex-W-real", T, ("W",),
         lambda a: dict(x=a.zeros((2, 4, 9, 9), "complex64"))),
        ("complex-b-real", T, ("b",),
         lambda a: dict(x=a.zeros((2, 4, 9, 9), "complex64"),
                        W=a.zeros((6, 2, 3, 3), "complex64"))),
        ("complex-W-precision", T, ("W", "x"),
         lambda a: dict(x=a.zeros((2, 4, 9, 9), "complex64"),
                        W=a.zeros((6, 2, 3, 3), "complex128"), b=None)),
        ("complex-y-dtype", T, ("y",),
         lambda a: dict(x=a.zeros((2, 4, 9, 9), "complex64"),
                        W=a.zeros((6, 2, 3, 3), "complex64"), b=a.zeros((6,), "complex64"))),
    ]
    return [Case("forward", *row) for row in rows]


def _backward_data_cases():
    V, T = ValueError, TypeError
    many = 2 ** 16  # groups past the GEMM's grid (65535), two channels each: no algorithm runs
    rows = [
        ("x-shape", V, ("x", "y", "W"), lambda a: dict(x=a.zeros((2, 6, 8, 9)))),
        ("y-shape", V, ("x", "y"), lambda a: dict(y=a.out((2, 4, 8, 8)))),
        ("y-dtype", T, ("y",), lambda a: dict(y=a.out((2, 4, 9, 9), "float64"), b=None)),
        ("y-strided-dtype", T, ("y",),
         lambda a: dict(y=a.strided((2, 4, 9, 9), "float64"), b=None)),
        ("y-ndim", V, ("y", "W"), lambda a: dict(y=a.out((2, 4, 81)))),
        ("y-host", T, ("y",), lambda a: dict(y=a.host((2, 4, 9, 9)))),
        ("y-empty", V, ("y",), lambda a: dict(y=a.out((2, 4, 0, 9)))),
        ("y-channels-groups", V, ("y", "groups"), lambda a: dict(y=a.out((2, 5, 9, 9)), b=None)),
        ("y-channels-W", V, ("W", "y", "d_layout"),
         lambda a: dict(y=a.out((2, 6, 9, 9)), b=None)),
        ("y-overlaps-x", V, ("y", "x"),
         lambda a: dict(zip(("x", "y"), a.overlapping((2, 6, 9, 9), (2, 4, 9, 9))))),
        ("y-overlaps-W", V, ("y", "W"),
         lambda a: dict(zip(("W", "y"), a.overlapping((6, 2, 3, 3), (2, 4, 9, 9))))),
        ("y-overlaps-b", V, ("y", "b"),
         lambda a: dict(zip(("b", "y"), a.overlapping((4,), (2, 4, 9, 9))))),
        ("x-unbatched", V, ("x", "W"), lambda a: dict(x=a.zeros((6, 9, 9)))),
        ("x-host", T, ("x",), lambda a: dict(x=a.host((2, 6, 9, 9)))),
        ("x-int", T, ("x",), lambda a: dict(x=a.zeros((2, 6, 9, 9), "int32"))),
        ("W-dtype", T, ("W", "x"), lambda a: dict(W=a.zeros((6, 2, 3, 3), "float64"))),
        ("W-host", T, ("W",), lambda a: dict(W=a.host((6, 2, 3, 3)))),
        ("W-out-channels-groups", V, ("W", "groups"),
         lambda a: dict(W=a.zeros((5, 2, 3, 3)), x=a.zeros((2, 5, 9, 9)))),
        ("W-nhwc-channels", V, ("W", "w_layout", "d_layout"),
         lambda a: dict(W=a.zeros((6, 3, 3, 3)), w_layout=1)),
        ("W-other-device", V, ("W", "x", "y"),
         lambda a: dict(W=a.on_device(1, (6, 2, 3, 3))), 2),
        ("b-shape", V, ("b", "y"), lambda a: dict(b=a.zeros((5,)))),
        ("b-dtype", T, ("b", "y"), lambda a: dict(b=a.zeros((4,), "float64"))),
        ("b-host", T, ("b",), lambda a: dict(b=a.host((4,)))),
        ("b-other-device", V, ("b", "y"), lambda a: dict(b=a.on_device(1, (4,))), 2),
        ("groups-0", V, ("groups",), lambda a: dict(groups=0)),
        ("groups-beyond-every-algorithm", V, ("groups",),
         lambda a: dict(W=a.zeros((many, 2, 1, 1)), x=a.zeros((1, many, 1, 1)), b=None,
                        y=a.out((1, 2 * many, 1, 1)), pad=(0, 0), groups=many)),
        ("pad-negative", V, ("pad",), lambda a: dict(pad=(-1, 1))),
        ("stride-0", V, ("stride",), lambda a: dict(stride=0)),
        ("dilation-length", V, ("dilation",), lambda a: dict(dilation=(1,))),
        ("kernel-larger-than-padded-y", V, ("y", "pad"),
         lambda a: dict(y=a.out((2, 4, 2, 2)), pad=(0, 0))),
        ("complex-W-precision", T, ("W", "x"),
         lambda a: dict(x=a.zeros((2, 6, 9, 9), "complex64"),
                        W=a.zeros((6, 2, 3, 3), "complex128"), b=None,
                        y=a.out((2, 4, 9, 9), "complex64"))),
    ]
    return [Case("backward_data", *row) for row in rows]


def _backward_filter_cases():
    V, T = ValueError, TypeError
    many = 2 ** 16
    rows = [
        ("gy-shape", V, ("gy", "x", "gW"), lambda a: dict(gy=a.zeros((2, 6, 9, 8)))),
        ("gy-dtype", T, ("gy", "x"), lambda a: dict(gy=a.zeros((2, 6, 9, 9), "float64"))),
        ("gy-unbatched", V, ("gy", "gW"), lambda a: dict(gy=a.zeros((6, 9, 9)))),
        ("gy-host", T, ("gy",), lambda a: dict(gy=a.host((2, 6, 9, 9)))),
        ("gy-other-device", V, ("gy", "x", "gW"),
         lambda a: dict(gy=a.on_device(1, (2, 6, 9, 9))), 2),
        ("gW-dtype", T, ("gW",), lambda a: dict(gW=a.out((6, 2, 3, 3), "float64"))),
        ("gW-strided-dtype", T, ("gW",), lambda a: dict(gW=a.strided((6, 2, 3, 3), "float64"))),
        ("gW-ndim", V, ("gW",), lambda a: dict(gW=a.out((6, 18)))),
        ("gW-host", T, ("gW",), lambda a: dict(gW=a.host((6, 2, 3, 3)))),
        ("gW-channels", V, ("gW", "x", "d_layout"), lambda a: dict(gW=a.out((6, 3, 3, 3)))),
        ("gW-overlaps-x", V, ("gW", "x"),
         lambda a: dict(zip(("x", "gW"), a.overlapping((2, 4, 9, 9), (6, 2, 3, 3))))),
        ("gW-overlaps-gy", V, ("gW", "gy"),
         lambda a: dict(zip(("gy", "gW"), a.overlapping((2, 6, 9, 9), (6, 2, 3, 3))))),
        ("x-unbatched", V, ("x", "gW"), lambda a: dict(x=a.zeros((4, 9, 9)))),
        ("x-host", T, ("x",), lambda a: dict(x=a.host((2, 4, 9, 9)))),
        ("x-int", T, ("x",), lambda a: dict(x=a.zeros((2, 4, 9, 9), "int32"))),
        ("x-channels-groups", V, ("x", "groups"), lambda a: dict(x=a.zeros((2, 5, 9, 9)))),
        ("groups-float", T, ("groups",), lambda a: dict(groups=1.0)),
        ("groups-beyond-every-algorithm", V, ("groups",),
         lambda a: dict(x=a.zeros((1, 2 * many, 1, 1)), gy=a.zeros((1, many, 1, 1)),
                        gW=a.out((many, 2, 1, 1)), pad=(0, 0), groups=many)),
        ("pad-length", V, ("pad",), lambda a: dict(pad=(1,))),
        ("stride-float", T, ("stride",), lambda a: dict(stride=1.0)),
        ("dilation-0", V, ("dilation",), lambda a: dict(dilation=0)),
        ("nhwc-gW-nchw-channels", V, ("gW", "w_layout", "d_layout"),
         lambda a: dict(x=a.zeros((2, 9, 9, 4)), gy=a.zeros((2, 9, 9, 6)),
                        gW=a.out((6, 3, 3, 3)), d_layout=1, w_layout=0)),
        ("complex-gy-precision", T, ("gy", "x"),
         lambda a: dict(x=a.zeros((2, 4, 9, 9), "complex64"),
                        gy=a.zeros((2, 6, 9, 9), "complex128"),
                        gW=a.out((6, 2, 3, 3), "complex64"))),
        ("complex-gW-dtype", T, ("gW",),
         lambda a: dict(x=a.zeros((2, 4, 9, 9), "complex64"),
                        gy=a.zeros((2, 6, 9, 9), "complex64"))),
    ]
    return [Case("backward_filter", *row) for row in rows]


CASES = _forward_cases() + _backward_data_cases() + _backward_filter_cases()
