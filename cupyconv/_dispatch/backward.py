"""The backward passes' algorithm registries and choice.

Backward-data and backward-weight each have two algorithms: the implicit GEMM (stride phases for
backward-data, split-K for backward-weight; :mod:`cupyconv._gemm.backward`) and the depthwise
kernels (:mod:`cupyconv._depthwise.launch`).  ``"auto"`` takes the depthwise kernels for depthwise
problems (bandwidth-bound; the GEMM view wastes its tiles on one channel per group) and the
implicit GEMM otherwise.  A call is prepared like a forward one: its run, recorded once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.launch import GRID_YZ_MAX
from cupyconv._core.names import arg
from cupyconv._depthwise.applicable import is_depthwise
from cupyconv._depthwise.launch import run_depthwise_backward_data, run_depthwise_backward_weight
from cupyconv._dispatch.callcache import PreparedCall, prepare
from cupyconv._direct.launch import repair_merged_data
from cupyconv._gemm.backward import data_merge, run_backward_data, run_backward_weight
from cupyconv._gemm.launch import grid_fits


def _gemm_fits(geom: ConvGeometry) -> bool:
    # GEMM columns: C/g (backward-data), taps x C/g (backward-weight), one grid row per group
    return grid_fits(geom.in_channels // geom.groups * math.prod(geom.kernel), geom.groups)


def _implicit_backward_data(geom: ConvGeometry, dy, w, dx, bias=None) -> bool:
    """Backward-data on the implicit GEMM; where it merged groups, then the repair pass (as the
    forward's, ``repair_merged_data``).  Returns whether the bias was added (run_backward_data)."""
    added = run_backward_data(geom, dy, w, dx, bias)
    if data_merge(geom, dx.data.device_id)[0] > 1:
        repair_merged_data(geom, dy, w, bias if added else None, dx)
    return added


@dataclass(frozen=True)
class BackwardAlgorithm:
    name: str
    applicable: Callable[[ConvGeometry], bool]
    data: Callable    # data(geom, dy, w, dx, bias=None) -> bias added?: writes dx
    weight: Callable  # weight(geom, x, dy, dw): writes dw
    refusal: str      # why a named method does not apply

    def prepare_data(self, geom: ConvGeometry, dy, w, dx) -> PreparedCall:
        """Run backward-data on these validated arrays (the caller holds the device) and return
        the prepared call that repeats it for arrays like these."""
        return prepare(lambda ops, dx: self.data(geom, *ops, dx), ("dy", "w"), (dy, w), dx)

    def prepare_weight(self, geom: ConvGeometry, x, dy, dw) -> PreparedCall:
        """As :meth:`prepare_data`, for backward-weight."""
        return prepare(lambda ops, dw: self.weight(geom, *ops, dw), ("x", "dy"), (x, dy), dw)


BACKWARD: dict[str, BackwardAlgorithm] = {
    "implicit_gemm": BackwardAlgorithm(
        "implicit_gemm", _gemm_fits, _implicit_backward_data, run_backward_weight,
        f"method 'implicit_gemm' runs at most {GRID_YZ_MAX} groups (one launch grid row each)"),
    "depthwise": BackwardAlgorithm(
        "depthwise", is_depthwise, run_depthwise_backward_data, run_depthwise_backward_weight,
        "method 'depthwise' needs groups == input channels"),
}
BACKWARD_METHODS = ("auto",) + tuple(BACKWARD)


def backward_method(geom: ConvGeometry, method) -> BackwardAlgorithm:
    """The backward algorithm for ``method`` ("auto" or a name of :data:`BACKWARD`).  Raises
    ValueError for unknown or inapplicable methods."""
    if not isinstance(method, str) or method not in BACKWARD_METHODS:
        raise ValueError(f"method must be one of {BACKWARD_METHODS}, got {method!r}")
    algo = BACKWARD[method if method != "auto" else
                    "depthwise" if is_depthwise(geom) else "implicit_gemm"]
    if not algo.applicable(geom):
        got = f"got {arg('groups')}={geom.groups}, {geom.in_channels} channels"
        if method == "auto":  # (no method was named: say what no algorithm can run)
            raise ValueError(f"no backward algorithm runs this problem ({got}): the implicit "
                             f"GEMM runs at most {GRID_YZ_MAX} groups (one launch grid row "
                             f"each), the depthwise kernels need as many groups as channels")
        raise ValueError(f"{algo.refusal} ({got})")
    return algo
