"""Which forward algorithm runs a problem: the heuristic choice of the registry
(:func:`cupyconv._dispatch.forward.heuristic_choice`) or, with ``CUPYCONV_AUTOTUNE=1``, the
measured winner from the tuning cache; and :func:`describe`, the report of that choice."""

from __future__ import annotations

import os

from cupyconv._core.caches import memoized
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.jit import discovery_active
from cupyconv._dispatch.forward import Algorithm, heuristic_choice, planned_gemm
from cupyconv._dispatch.tune import tuned_algorithm
from cupyconv._gemm.forward import forward_merge


def autotune_enabled() -> bool:
    """``CUPYCONV_AUTOTUNE=1`` (or true/yes/on): ``auto`` asks the tuning cache
    (:mod:`cupyconv._dispatch.tune`)."""
    value = os.environ.get("CUPYCONV_AUTOTUNE")  # (read per call: it may change at run time)
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def choose(geom: ConvGeometry, method: str) -> Algorithm:
    """The algorithm that runs ``geom`` on the current device: the heuristic choice, or with
    ``CUPYCONV_AUTOTUNE=1`` and ``method="auto"`` the measured winner from the tuning cache
    (tuned on first use of the problem; not while ``jit.discovering``: nothing runs to time)."""
    import cupy

    device_id = cupy.cuda.Device().id
    if method == "auto" and autotune_enabled() and not discovery_active():
        return tuned_choice(geom, device_id)
    return heuristic_choice(geom, method, device_id)


@memoized(4096)
def tuned_choice(geom: ConvGeometry, device_id: int) -> Algorithm:
    """:func:`cupyconv._dispatch.tune.tuned_algorithm`, remembered per problem and device."""
    return tuned_algorithm(geom, device_id)


def describe(geom: ConvGeometry, method: str = "auto", device_id: int | None = None) -> dict:
    """What ``method`` runs for ``geom``: algorithm, its cost estimate, and the GEMM tile
    ``(BM, BN, BK, TM, TN)``, split-K count and group merge factor (1: groups run as they are)
    where it is a GEMM path.  JSON-serializable."""
    if device_id is None:
        import cupy

        device_id = cupy.cuda.Device().id
    algo = choose(geom, method)
    out = {"algorithm": algo.name, "description": algo.description,
           "tuned": algo.plan is not None or (method == "auto" and autotune_enabled()),
           "estimated_ms": algo.cost(geom, device_id) * 1e3, "gemm": None}
    planned = planned_gemm(geom, algo, device_id)
    if planned is not None:
        kernel, shape, plan = planned
        out["gemm"] = {"kernel": kernel, "m": shape[0], "n": shape[1], "k": shape[2],
                       "batch": shape[3], "tile": list(plan.tile), "splits": plan.splits,
                       "merge": forward_merge(geom, device_id)[0]
                       if algo.name == "implicit_gemm" else 1}
    return out
