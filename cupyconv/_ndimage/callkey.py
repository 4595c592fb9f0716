"""Options keyed by value for the prepared calls of ``cupyconv.ndimage`` (its ``_call_key``):
equal keys only for options that every step of a filter's full path treats alike."""

from __future__ import annotations

import struct

import numpy as np


class _Uncacheable(Exception):
    """An option the call key cannot hold by value: the call takes the full path."""

_pack_float = struct.Struct("<d").pack


# NumPy scalars keyed by their bytes.  NumPy complex scalars are left out: float() of one (a
# complex sigma) warns on every full-path call, which a warm call would not repeat.
_NUMPY_SCALARS = frozenset(np.dtype(c).type for c in "?" + np.typecodes["AllInteger"]
                           + np.typecodes["Float"])


# the types ``output=`` may name a dtype by
_OUTPUT_TYPES = frozenset({bool, int, float, complex} | {
    np.dtype(c).type for c in "?" + np.typecodes["AllInteger"] + np.typecodes["AllFloat"]})


def _frozen(v):
    """The key of one option by value: equal keys only for options that every step of the full
    path treats alike (``1``, ``1.0``, ``True`` and ``np.float64(1)`` differ, and so do ``0.0``
    and ``-0.0``; lists and tuples by their items; NumPy arrays by dtype, shape and bytes; a
    kwargs dict by its sorted items).  Raises :class:`_Uncacheable` for anything else (a CuPy
    or foreign array, an unknown object, which may change between calls)."""
    t = type(v)
    if t is str or t is int or v is None:
        return v
    if t is float:
        return float, _pack_float(v)  # by bits: -0.0 is not 0.0, a NaN equals its own bits
    if t is tuple or t is list:
        return t, tuple(map(_frozen, v))
    if t is bool:
        return bool, v
    if t is complex:
        return complex, _pack_float(v.real), _pack_float(v.imag)
    if t in _NUMPY_SCALARS:
        return t, v.tobytes()
    if t is np.ndarray and v.dtype.kind in "biufc":
        return t, v.dtype.str, v.shape, v.tobytes()
    if isinstance(v, np.dtype):
        return np.dtype, v
    if t is type and v in _OUTPUT_TYPES:
        return type, v
    if t is dict:
        return dict, tuple((k, _frozen(e)) for k, e in sorted(v.items()))
    raise _Uncacheable
