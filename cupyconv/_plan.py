"""Algorithm registry and choice: which kernel runs a given convolution.

Each :class:`Algorithm` says whether it can run a problem (``applicable``) and what it should cost
(``cost``, in relative units: only comparisons between algorithms matter).  ``method="auto"`` takes
the cheapest applicable one; the direct kernel applies to everything and is the fallback, in the
manner of MIOpen's solver list.  Choices are cached per geometry (which includes dtype and layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ._direct import run_direct
from ._geometry import ConvGeometry


@dataclass(frozen=True)
class Algorithm:
    name: str
    applicable: Callable[[ConvGeometry], bool]
    cost: Callable[[ConvGeometry], float]
    run: Callable  # run(geometry, x, w, bias, y) -> None; writes y
    description: str = ""


def _direct_cost(g: ConvGeometry) -> float:
    # One FMA per thread-iteration from global memory (cached): a few hundred GFLOP/s at best.
    return g.flops / 3e11


FORWARD: dict[str, Algorithm] = {
    "direct": Algorithm("direct", lambda g: True, _direct_cost, run_direct,
                        "one output per thread; every option; the GPU reference"),
}


def forward_methods() -> tuple[str, ...]:
    return ("auto",) + tuple(FORWARD)


def check_method(method) -> str:
    if not isinstance(method, str) or method not in forward_methods():
        raise ValueError(f"method must be one of {forward_methods()}, got {method!r}")
    return method


@lru_cache(maxsize=4096)
def choose(geom: ConvGeometry, method: str) -> Algorithm:
    """The algorithm that runs ``geom``: the named one, or the cheapest applicable for "auto"."""
    if method != "auto":
        algo = FORWARD[method]
        if not algo.applicable(geom):
            raise ValueError(f"method {method!r} cannot run this problem ({geom}); use method='auto'")
        return algo
    candidates = [a for a in FORWARD.values() if a.applicable(geom)]
    return min(candidates, key=lambda a: a.cost(geom))
