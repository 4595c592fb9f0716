"""Algorithm registry and choice: which kernel runs a given convolution.

Each :class:`Algorithm` says whether it can run a problem (``applicable``) and what it should cost
(``cost``, in relative units: only comparisons between algorithms matter).  ``method="auto"`` takes
the cheapest applicable one; the direct kernel applies to everything and is the fallback, in the
manner of MIOpen's solver list.  Choices are cached per geometry (which includes dtype and layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ._depthwise import depthwise_applicable, run_depthwise, tile_plan
from ._direct import run_direct
from ._forward_gemm import is_pointwise, pointwise_as_gemm, run_im2col_gemm, run_implicit_gemm
from ._gemm_launch import BANDWIDTH, plan_gemm
from ._geometry import ConvGeometry

INT32_MAX = 2 ** 31 - 1


@dataclass(frozen=True)
class Algorithm:
    name: str
    applicable: Callable[[ConvGeometry], bool]
    cost: Callable[[ConvGeometry, int], float]  # (geometry, device id) -> estimated seconds
    run: Callable  # run(geometry, x, w, bias, y) -> None; writes y
    description: str = ""


# Cost hints are estimated seconds; only their ratios matter.  The GEMM paths take the planned
# GEMM time (tile, split-K and wave quantization included, see _gemm_launch.plan_gemm) and add what
# their operand view costs: the implicit loader's tap decoding (a factor measured on an H200,
# benchmarks/NOTES.md), or the im2col buffer's round trip through memory.
_DIRECT_RATE = 1.5e12
_IMPLICIT_FACTOR = 1.15       # channels a multiple of the k-slice: one tap decode per slice
_IMPLICIT_GENERIC_FACTOR = 3  # otherwise every element decodes its tap with divisions
_IM2COL_PASSES = 6            # the im2col kernel's cost, in col-sized trips through memory
_IM2COL_GEMM_FACTOR = 1.1


_DIRECT_BANDWIDTH = 1.7e11     # depthwise 3x3 through the direct kernel: it re-reads per tap
_DEPTHWISE_BANDWIDTH = 2.5e12  # channels-first tile kernel, full tiles (benchmarks/NOTES.md)
_DEPTHWISE_GATHER_BANDWIDTH = 6e11  # gather kernel (channels-last, oversized windows)


def _bytes(g: ConvGeometry) -> int:
    return g.bytes_moved({"float16": 2, "float32": 4, "float64": 8}[g.dtype])


def _direct_cost(g: ConvGeometry, device_id: int) -> float:
    return max(g.flops / _DIRECT_RATE, _bytes(g) / _DIRECT_BANDWIDTH)


def _depthwise_cost(g: ConvGeometry, device_id: int) -> float:
    t = tile_plan(g, False)
    if t is None:
        return _bytes(g) / _DEPTHWISE_GATHER_BANDWIDTH
    oh, ow = g.as_3d()["out_spatial"][1:]
    fill = oh * ow / (t.tiles_h * t.by * t.vr * t.tiles_w * t.bx)  # idle threads of edge tiles
    return _bytes(g) / (_DEPTHWISE_BANDWIDTH * fill)


def _gemm_fits(g: ConvGeometry) -> bool:
    _, n, k, _ = g.gemm_forward
    return max(g.batch * math.prod(g.out_spatial), n, k) <= INT32_MAX


def _implicit_cost(g: ConvGeometry, device_id: int) -> float:
    m, n, k, b = g.gemm_forward
    if is_pointwise(g) and pointwise_as_gemm(g):
        if g.channels_last:
            return plan_gemm(g.dtype, m, n, k, b, device_id).seconds
        pixels = math.prod(g.spatial)
        return plan_gemm(g.dtype, pixels, n, k, b * g.batch, device_id).seconds
    plan = plan_gemm(g.dtype, m, n, k, b, device_id)
    uniform = (g.in_channels // g.groups) % plan.tile[2] == 0
    return (_IMPLICIT_FACTOR if uniform else _IMPLICIT_GENERIC_FACTOR) * plan.seconds


def _im2col_applicable(g: ConvGeometry) -> bool:
    return _gemm_fits(g) and math.prod(g.col_shape) <= INT32_MAX


def _im2col_cost(g: ConvGeometry, device_id: int) -> float:
    m, n, k, b = g.gemm_forward
    col_bytes = math.prod(g.col_shape) * (2 if g.dtype == "float16" else 4)
    if g.channels_last:
        gemm = plan_gemm(g.dtype, m, n, k, b, device_id)
    else:
        gemm = plan_gemm(g.dtype, math.prod(g.out_spatial), n, k, b * g.batch, device_id)
    return _IM2COL_PASSES * col_bytes / BANDWIDTH + _IM2COL_GEMM_FACTOR * gemm.seconds


FORWARD: dict[str, Algorithm] = {
    "implicit_gemm": Algorithm("implicit_gemm", _gemm_fits, _implicit_cost, run_implicit_gemm,
                               "tiled GEMM reading x through an implicit im2col view (no buffer)"),
    "im2col_gemm": Algorithm("im2col_gemm", _im2col_applicable, _im2col_cost, run_im2col_gemm,
                             "explicit im2col buffer + one batched tiled GEMM"),
    "depthwise": Algorithm("depthwise", depthwise_applicable, _depthwise_cost, run_depthwise,
                           "groups == channels: halo windows in shared memory (channels-first), "
                           "channel-parallel gather (channels-last)"),
    "direct": Algorithm("direct", lambda g: True, _direct_cost, run_direct,
                        "one output per thread; every option; the GPU reference"),
}


def forward_methods() -> tuple[str, ...]:
    return ("auto",) + tuple(FORWARD)


def check_method(method) -> str:
    if not isinstance(method, str) or method not in forward_methods():
        raise ValueError(f"method must be one of {forward_methods()}, got {method!r}")
    return method


def choose(geom: ConvGeometry, method: str) -> Algorithm:
    """The algorithm that runs ``geom`` on the current device (see :func:`_choose`)."""
    import cupy

    return _choose(geom, method, cupy.cuda.Device().id)


@lru_cache(maxsize=4096)
def _choose(geom: ConvGeometry, method: str, device_id: int) -> Algorithm:
    """The algorithm that runs ``geom``: the named one, or the cheapest applicable for "auto"."""
    if method != "auto":
        algo = FORWARD[method]
        if not algo.applicable(geom):
            raise ValueError(f"method {method!r} cannot run this problem ({geom}); use method='auto'")
        return algo
    candidates = [a for a in FORWARD.values() if a.applicable(geom)]
    return min(candidates, key=lambda a: a.cost(geom, device_id))
