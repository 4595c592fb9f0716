"""Algorithm registry and choice: which kernel runs a given convolution.

Each :class:`Algorithm` says whether it can run a problem (``applicable``), what it should cost
(``cost``, in relative units: only comparisons between algorithms matter) and how a call is
prepared (``prepare``: its run, recorded once into a replayable program, see
:mod:`cupyconv._dispatch.callcache`).  ``method="auto"`` takes
the cheapest applicable one; the direct kernel applies to everything and is the fallback, in the
manner of MIOpen's solver list.  Choices are cached per geometry (which includes dtype and layout).

Every algorithm also runs the inference epilogue ``y = act(conv + bias + z)``: the GEMM and direct
kernels in their own stores, the depthwise kernels with one pass after them
(:mod:`cupyconv._core.epilogue`).  The choice does not depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.copy import contiguous_vector
from cupyconv._core.dtypes import itemsize
from cupyconv._core.epilogue import residual_like
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.launch import sm_count
from cupyconv._core.precision import gemm_math
from cupyconv._depthwise.channels_last import applies as channels_last_applies
from cupyconv._depthwise.applicable import depthwise_applicable
from cupyconv._depthwise.launch import run_depthwise
from cupyconv._depthwise.planes import plane_plan
from cupyconv._depthwise.tiles import tile_plan
from cupyconv._direct.grouped import grouped_applicable, grouped_plan, run_grouped
from cupyconv._direct.launch import repair_merged_forward, run_direct
from cupyconv._dispatch.callcache import PreparedCall, prepare
from cupyconv._gemm import tma_columns
from cupyconv._gemm.forward import (columns_pay, forward_merge, gemm_launch_shape, is_pointwise,
                                    run_im2col_gemm, run_implicit_gemm)
from cupyconv._gemm.implicit_cost import few_channel_seconds, few_channels
from cupyconv._gemm.launch import MAX_GEMM_ROWS, forced_plan, grid_fits
from cupyconv._gemm.plans import BANDWIDTH, LAUNCH_S, GemmPlan, dense_plan, plan_gemm, with_build

INT32_MAX = 2 ** 31 - 1


@dataclass(frozen=True)
class Algorithm:
    name: str
    applicable: Callable[[ConvGeometry], bool]
    cost: Callable[[ConvGeometry, int], float]  # (geometry, device id) -> estimated seconds
    # run(geometry, x, w, bias, y, *, z=None, act=NO_ACTIVATION) -> None; writes
    # y = act(conv + bias + z), bias contiguous, z (optional) with y's strides, act a code of
    # cupyconv._core.activation
    run: Callable
    description: str = ""
    tiled: bool = False              # runs the tiled GEMM: its tile/split-K can be forced (tuning)
    plan: GemmPlan | None = None     # a tuned plan the run is forced to; None: plan_gemm's choice

    def prepare(self, geom: ConvGeometry, x, w, bias, y, z=None,
                act: int = NO_ACTIVATION) -> PreparedCall:
        """Run ``geom`` on these validated arrays (writing y = act(conv + bias + z); the caller
        holds the device) and return the prepared call that repeats it for arrays like these.
        z is an operand like x (a later call's z is read, never this one's); ``act`` is part of
        the recorded launches, as the call-cache key has it."""

        def run(inputs, y):
            x, w, bias, z = inputs
            self.run(geom, x, w, contiguous_vector(bias), y, z=residual_like(z, y), act=act)

        return prepare(run, ("x", "w", "bias", "z"), (x, w, bias, z), y)

    def with_plan(self, plan: GemmPlan | None) -> "Algorithm":
        """This algorithm with every GEMM launch of its run forced to ``plan``."""
        if plan is None:
            return self
        base = self.run

        def run(*args, **kwargs):
            with forced_plan(plan):
                base(*args, **kwargs)

        return replace(self, run=run, plan=plan)


# Cost hints are estimated seconds; only their ratios matter.  The GEMM paths take the planned
# GEMM time (tile, split-K and wave quantization included, see _gemm.plans.plan_gemm) and add what
# their operand view costs: the implicit loader's tap decoding
# (_gemm.implicit_cost.implicit_conv_seconds; with the implicit GEMM's group merge,
# _gemm.forward.forward_merge), or the im2col buffer's round trip through memory; every launch
# beyond the first adds LAUNCH_S (small problems are bound by launches, not by the GPU).  The
# grouped direct kernel estimates itself (_direct.grouped).
_DIRECT_RATE = 1.5e12
# The direct kernel's thread walks its C/g x taps products one after the other: on a problem of
# less than a wave of outputs that chain is the time (H100, benchmarks/notes/gemm.md, "Issue 15":
# 7x7 1x1 layers of 960 channels ran 139 us, ~145 ns per step).
_DIRECT_STEP_S = 1.45e-7
_DIRECT_THREADS_PER_SM = 2048
_IM2COL_PASSES = 6            # the im2col kernel's cost, in col-sized trips through memory
_IM2COL_GEMM_FACTOR = 1.1


_DIRECT_BANDWIDTH = 1.7e11     # depthwise 3x3 through the direct kernel: it re-reads per tap
# channels-first tile kernel, full tiles (benchmarks/notes/depthwise.md, "issue 5 started")
_DEPTHWISE_BANDWIDTH = 2.5e12
_DEPTHWISE_GATHER_BANDWIDTH = 6e11  # gather kernel (channels-last, oversized windows)
# channels-last kernels (depthwise_cl.cu): an estimate below the tile kernel's, not yet measured
_DEPTHWISE_CL_BANDWIDTH = 2e12
# Arithmetic rates of the depthwise kernels (H100, benchmarks/experiments/README.md: exp_depthwise_rate.py): each output
# chains its taps, so large kernels and channel multipliers (a one-channel input with many
# filters is "depthwise" too) are bound by them, not by bytes.  Highest rates measured: plane
# kernel 12 TFLOP/s (7x7), channels-last 5.5 (7x7), tile 0.65-1.1, gather 0.5-1.4 (the top of
# that range: the GEMM estimate it competes with is optimistic on grouped problems); the bytes-only
# model sent an 80-tap one-channel 1-d layer with 128 filters to the tile kernel: 8 ms against
# 0.26 ms on the GEMM.
_DEPTHWISE_PLANE_RATE = 12e12
_DEPTHWISE_CL_RATE = 5e12
_DEPTHWISE_TILE_RATE = 1e12
_DEPTHWISE_GATHER_RATE = 1e12


def _bytes(g: ConvGeometry) -> int:
    return g.bytes_moved(itemsize(g.dtype))


def _direct_cost(g: ConvGeometry, device_id: int) -> float:
    waves = math.ceil(math.prod(g.output_shape) / (sm_count(device_id) * _DIRECT_THREADS_PER_SM))
    chain = waves * (g.in_channels // g.groups) * math.prod(g.kernel) * _DIRECT_STEP_S
    # (its re-reads cost per element: 16-bit storage is no cheaper, H100: a one-channel fp16
    # 3x3 with 16 filters ran 0.63 ms, as in fp32, where 2-byte bytes predicted half)
    moved = g.bytes_moved(max(4, itemsize(g.dtype)))
    return max(g.flops / _DIRECT_RATE, moved / _DIRECT_BANDWIDTH, chain)


def _depthwise_cost(g: ConvGeometry, device_id: int) -> float:
    """Bytes at the kernel's bandwidth or FLOPs at its rate, whichever takes longer, both scaled
    by the share of its threads that hold outputs (``fill``)."""
    p = plane_plan(g)
    if p is not None:  # (assumes contiguous planes, as conv's inputs usually are)
        oh, ow = g.as_3d()["out_spatial"][1:]
        # idle lanes: columns past the plane in the last strip, rows past it in the last item
        fill = (oh * ow * p.gw * p.qw) / (math.ceil(oh / p.ry) * p.ry * p.strips * 4 * p.qw * 32)
        bandwidth, rate = _DEPTHWISE_BANDWIDTH, _DEPTHWISE_PLANE_RATE
    elif channels_last_applies(g):
        fill, bandwidth, rate = 1.0, _DEPTHWISE_CL_BANDWIDTH, _DEPTHWISE_CL_RATE
    elif (t := tile_plan(g, False)) is None:
        fill, bandwidth, rate = 1.0, _DEPTHWISE_GATHER_BANDWIDTH, _DEPTHWISE_GATHER_RATE
    else:
        oh, ow = g.as_3d()["out_spatial"][1:]
        fill = oh * ow / (t.tiles_h * t.by * t.vr * t.tiles_w * t.tile_w)  # idle edge-tile threads
        bandwidth, rate = _DEPTHWISE_BANDWIDTH, _DEPTHWISE_TILE_RATE
    return max(_bytes(g) / bandwidth, g.flops / rate) / fill


def _gemm_fits(g: ConvGeometry, algorithm: str = "implicit_gemm") -> bool:
    """The tiled GEMM kernels index in 32-bit ints: n and k, and the rows of a dense GEMM, at most
    MAX_GEMM_ROWS; the implicit kernel runs more rows as several launches (row slabs)."""
    kernel, (m, n, k, batch) = gemm_launch_shape(g, algorithm)
    return max(n, k, m if kernel == "gemm" else 0) <= MAX_GEMM_ROWS and grid_fits(n, batch)


def run_implicit_gemm_exact(geom: ConvGeometry, x, w, bias, y, *, z=None,
                            act: int = NO_ACTIVATION) -> None:
    """The implicit GEMM; where it merged groups (block-diagonal weights), then the repair pass
    that recomputes the outputs a NaN or inf of another group's input reached through the zero
    weights (``repair_merged_forward``), so non-finite values propagate as per group."""
    run_implicit_gemm(geom, x, w, bias, y, z=z, act=act)
    if forward_merge(geom, y.data.device_id)[0] > 1:
        repair_merged_forward(geom, x, w, bias, y, z=z, act=act)


def _implicit_cost(g: ConvGeometry, device_id: int) -> float:
    if columns_pay(g, device_id):  # (few channels on Hopper: run_implicit_gemm's route)
        return tma_columns.seconds(g)
    return forward_merge(g, device_id)[1]


def _grouped_cost(g: ConvGeometry, device_id: int) -> float:
    return grouped_plan(g, sm_count(device_id))[1]


def _im2col_applicable(g: ConvGeometry) -> bool:
    return _gemm_fits(g, "im2col_gemm") and math.prod(g.col_shape) <= INT32_MAX


def _im2col_cost(g: ConvGeometry, device_id: int) -> float:
    shape = gemm_launch_shape(g, "im2col_gemm")[1]
    gemm_s = _IM2COL_GEMM_FACTOR * plan_gemm(g.dtype, *shape, device_id, g.precision).seconds
    if few_channels(g.dtype, g.precision, g.in_channels // g.groups, device_id):
        # (as the implicit GEMM's estimate of such problems: latency- and traffic-bound blocks)
        gemm_s = max(gemm_s, few_channel_seconds(g.dtype, g.precision, *shape, device_id))
    if is_pointwise(g):  # the column matrix is x itself: no im2col pass
        return gemm_s
    # (4 bytes per column element whatever the dtype: the im2col kernel writes elements one by
    # one, and 16-bit ones cost as much, H100: a one-channel 80-tap fp16 1-d layer spent ~0.2 ms
    # on its 41 MB column matrix; float64 is counted at 4 as it was fitted)
    col_bytes = math.prod(g.col_shape) * 4
    return _IM2COL_PASSES * col_bytes / BANDWIDTH + LAUNCH_S + gemm_s


FORWARD: dict[str, Algorithm] = {
    "implicit_gemm": Algorithm("implicit_gemm", _gemm_fits, _implicit_cost, run_implicit_gemm_exact,
                               "tiled GEMM reading x through an implicit im2col view (no buffer); "
                               "groups of few channels merged (block-diagonal weights) where "
                               "that pays", tiled=True),
    "im2col_gemm": Algorithm("im2col_gemm", _im2col_applicable, _im2col_cost, run_im2col_gemm,
                             "explicit im2col buffer + one batched tiled GEMM", tiled=True),
    "depthwise": Algorithm("depthwise", depthwise_applicable, _depthwise_cost, run_depthwise,
                           "groups == channels: row walk per plane (channels-first, unit stride), "
                           "halo windows in shared memory (other channels-first), "
                           "channel vectors with a row walk (channels-last), "
                           "channel-parallel gather (channels-last with a channel multiplier)"),
    "grouped_direct": Algorithm("grouped_direct", grouped_applicable, _grouped_cost, run_grouped,
                                "1 < groups < channels: register tiles of a group's output "
                                "channels x pixels per thread (few channels per group, "
                                "channels-first)"),
    "direct": Algorithm("direct", lambda g: True, _direct_cost, run_direct,
                        "one output per thread; every option; the GPU reference"),
}


def forward_methods() -> tuple[str, ...]:
    return ("auto",) + tuple(FORWARD)


def check_method(method) -> str:
    if not isinstance(method, str) or method not in forward_methods():
        raise ValueError(f"method must be one of {forward_methods()}, got {method!r}")
    return method


def planned_gemm(geom: ConvGeometry, algo: Algorithm, device_id: int):
    """``(kernel, (m, n, k, batch), GemmPlan)`` that ``algo`` launches for ``geom``, or None where it
    does not use the tiled GEMM.  Reads the same plan functions as the launchers, so the report is
    what runs (the GPU tests compare it with :func:`cupyconv._gemm.launch.record_plans`)."""
    launch = gemm_launch_shape(geom, algo.name, device_id) if algo.tiled else None
    if launch is None:
        return None
    kernel, shape = launch
    if algo.plan is not None:  # a tuned tile and split, on the problem's main loop
        return kernel, shape, with_build(replace(algo.plan, math=gemm_math(
            geom.dtype, geom.precision, device_id)), shape, device_id)
    plan = plan_gemm(geom.dtype, *shape, device_id, geom.precision)
    return kernel, shape, dense_plan(plan, geom.dtype, shape[2]) if kernel == "gemm" else plan


@memoized(4096)
def heuristic_choice(geom: ConvGeometry, method: str, device_id: int) -> Algorithm:
    """The algorithm that runs ``geom``: the named one, or the cheapest applicable for "auto"."""
    if method != "auto":
        algo = FORWARD[method]
        if not algo.applicable(geom):
            raise ValueError(f"method {method!r} cannot run this problem ({geom}); use method='auto'")
        return algo
    candidates = [a for a in FORWARD.values() if a.applicable(geom)]
    return min(candidates, key=lambda a: a.cost(geom, device_id))
