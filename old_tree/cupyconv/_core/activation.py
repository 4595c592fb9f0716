"""Activations of the fused epilogues: the names users pass, their kernel codes, and the float64
NumPy implementation that the reference uses.

The device side is one function, ``cc::activate`` in ``kernel_src/common/activation.cuh``; it
switches on the codes below, which are :data:`~cupyconv._core.kernels.KERNEL_CONSTANTS` (defined
in front of every kernel source), so the two sides cannot drift apart.  This module imports
neither CuPy nor a kernel: the reference and the argument checks use it on machines without a GPU.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.kernels import KERNEL_CONSTANTS

# name -> code; "swish" is PyTorch's other name for SiLU, "gelu" its default (approximate="none")
ACTIVATIONS: dict = {
    None: KERNEL_CONSTANTS["CC_ACT_NONE"],
    "relu": KERNEL_CONSTANTS["CC_ACT_RELU"],
    "relu6": KERNEL_CONSTANTS["CC_ACT_RELU6"],
    "silu": KERNEL_CONSTANTS["CC_ACT_SILU"],
    "swish": KERNEL_CONSTANTS["CC_ACT_SILU"],
    "gelu": KERNEL_CONSTANTS["CC_ACT_GELU"],
    "gelu_tanh": KERNEL_CONSTANTS["CC_ACT_GELU_TANH"],
}
NO_ACTIVATION = ACTIVATIONS[None]


def activation_code(activation, allowed=None) -> int:
    """The kernel code of ``activation`` (a name of :data:`ACTIVATIONS`, or None), restricted to
    the names in ``allowed`` where given; otherwise a ValueError naming the argument and listing
    the choices.  Runs before anything is compiled or launched."""
    choices = tuple(ACTIVATIONS) if allowed is None else tuple(allowed)
    if not (activation is None or isinstance(activation, str)) or activation not in choices:
        raise ValueError(f"activation must be one of {choices}, got {activation!r}")
    return ACTIVATIONS[activation]


_erf = np.vectorize(math.erf, otypes=[np.float64])


def activate_reference(v, activation) -> np.ndarray:
    """``activation`` (a name, or None) applied to ``v`` in float64, as PyTorch defines it: NaN
    passes through relu and relu6 (clamps, not comparisons that would drop it)."""
    code = activation_code(activation)
    v = np.asarray(v, dtype=np.float64)
    if code == NO_ACTIVATION:
        return v
    if code == ACTIVATIONS["relu"]:
        return np.where(v < 0, 0.0, v)
    if code == ACTIVATIONS["relu6"]:
        return np.where(v < 0, 0.0, np.where(v > 6, 6.0, v))
    if code == ACTIVATIONS["silu"]:
        # v * sigmoid(v), written through exp(-|v|) so that neither branch overflows
        e = np.exp(-np.abs(v))
        return v * np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    if code == ACTIVATIONS["gelu"]:
        return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))
    if code == ACTIVATIONS["gelu_tanh"]:
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    raise AssertionError(f"activation code {code} has no reference")  # pragma: no cover
