"""The taps of SciPy's Gaussian filters (and their derivatives), and the radius rule."""

from __future__ import annotations

import numbers
import operator

import numpy as np

from cupyconv._core.caches import memoized


def gaussian_kernel1d(sigma: float, order: int, radius: int) -> np.ndarray:
    """The 2 * radius + 1 taps of the ``order``-th derivative of a Gaussian of standard deviation
    ``sigma``, sampled at -radius..radius (float64), as SciPy's gaussian filters use them.

    The Gaussian is normalized to sum 1 over the samples; its derivative is p(x) * phi(x) with
    the polynomial p built by p_0 = 1, p_{m+1} = p_m' - x p_m / sigma^2.
    """
    if order < 0:
        raise ValueError(f"order must be non-negative, got {order}")
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (sigma * sigma) * x * x)
    phi /= phi.sum()
    if order == 0:
        return phi
    poly = np.zeros(order + 1)  # coefficients of x^0 .. x^order
    poly[0] = 1.0
    for _ in range(order):
        nxt = np.zeros_like(poly)
        nxt[:-1] += poly[1:] * np.arange(1, order + 1)  # derivative
        nxt[1:] -= poly[:-1] / (sigma * sigma)          # times -x / sigma^2
        poly = nxt
    return (x[:, None] ** np.arange(order + 1)) @ poly * phi


def _gaussian_radius(sigma, truncate, radius) -> int:
    lw = int(truncate * float(sigma) + 0.5)
    if radius is not None:
        lw = radius
    if not isinstance(lw, numbers.Integral) or lw < 0:
        raise ValueError(f"Radius must be a nonnegative integer, got {lw!r} (radius={radius!r}, "
                         f"sigma={sigma!r}, truncate={truncate!r})")
    return int(lw)


@memoized(256)
def _gaussian_taps(sigma: float, order: int, radius: int) -> np.ndarray:
    """The correlation taps (the reversed kernel) of one Gaussian pass, read-only: cached, as a
    filter is usually applied with the same sigma again (tens of microseconds of NumPy a call)."""
    if order < 0:
        raise ValueError(f"order must be non-negative, got {order}")
    taps = np.ascontiguousarray(gaussian_kernel1d(sigma, order, radius)[::-1])
    taps.flags.writeable = False
    return taps


def _gaussian_weights(sigma, order, truncate, radius) -> tuple[np.ndarray, int]:
    """(correlation taps, radius) of one pass of SciPy's gaussian_filter1d, checked in its
    order: sigma, radius, order."""
    sigma = float(sigma)
    lw = _gaussian_radius(sigma, truncate, radius)
    return _gaussian_taps(sigma, operator.index(order), lw), lw
