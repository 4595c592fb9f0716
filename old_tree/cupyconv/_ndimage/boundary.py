"""Boundary modes of cupyconv.ndimage on the host: names, kernel codes, and :func:`map_index`,
the NumPy mirror of ``nd::map_index`` (kernel_src/ndimage/nd_boundary.cuh) that the CPU suite
checks against SciPy and ``numpy.pad``."""

from __future__ import annotations

import numpy as np

from cupyconv._ndimage.kernels import ND_CONSTANTS

NEAREST, WRAP, REFLECT, MIRROR, CONSTANT = (ND_CONSTANTS[k] for k in (
    "ND_NEAREST", "ND_WRAP", "ND_REFLECT", "ND_MIRROR", "ND_CONSTANT"))
# SciPy's names: for filters the grid- modes are the same as wrap, constant and reflect.
MODES = {"nearest": NEAREST, "wrap": WRAP, "grid-wrap": WRAP, "reflect": REFLECT,
         "grid-mirror": REFLECT, "mirror": MIRROR, "constant": CONSTANT, "grid-constant": CONSTANT}


def mode_code(mode, name: str = "mode") -> int:
    """The kernel code of ``mode``; SciPy's exception type (RuntimeError) for an unknown one."""
    if isinstance(mode, str) and mode in MODES:
        return MODES[mode]
    raise RuntimeError(f"{name}={mode!r}: boundary mode not supported; use one of "
                       f"{', '.join(MODES)}")


def map_index(i, n: int, mode: int):
    """Index in [0, n) that coordinate(s) ``i`` read under ``mode``, or -1 where cval applies.

    Every mode but constant repeats its pattern, so any overhang maps (a filter longer than the
    axis).  Integer NumPy arrays or ints."""
    i = np.asarray(i, dtype=np.int64)
    inside = (i >= 0) & (i < n)
    if mode == NEAREST:
        out = np.clip(i, 0, n - 1)
    elif mode == WRAP:
        out = np.mod(i, n)
    elif mode == REFLECT:
        m = np.mod(i, 2 * n)
        out = np.where(m < n, m, 2 * n - 1 - m)
    elif mode == MIRROR:
        if n == 1:
            out = np.zeros_like(i)
        else:
            m = np.mod(i, 2 * n - 2)
            out = np.where(m < n, m, 2 * n - 2 - m)
    elif mode == CONSTANT:
        out = np.full_like(i, -1)
    else:
        raise ValueError(f"unknown boundary code {mode}")
    return np.where(inside, i, out)
