"""Complex convolutions from real ones: Gauss's three-product trick, and the conjugation rules.

Every convolution pass is bilinear in its two array operands, ``B(a, b)``, so for complex
``a = ar + i ai`` and ``b = br + i bi``

    B(a, b) = B(ar, br) - B(ai, bi) + i (B(ar, bi) + B(ai, br))

and three real products give all four terms (Gauss):

    k1 = B(ar + ai, br),  k2 = B(ar, bi - br),  k3 = B(ai, br + bi)
    real = k1 - k3 = B(ar, br) - B(ai, bi),  imag = k1 + k2 = B(ai, br) + B(ar, bi).

Conjugation follows PyTorch's autograd: the forward convolution and the transposed convolution
are the plain bilinear products (no conjugate, as ``scipy.signal`` and ``torch.nn.functional``);
the gradients are those of a real-valued loss, ``dx = conv_transpose(dy, conj(w))`` and
``dw = backward_weight(conj(x), dy)``, which makes them the adjoints of the forward map under
the inner product ``<a, b> = sum(conj(a) * b)``.  A conjugate costs nothing here: it flips the
sign of an imaginary part inside the three products.

The complex dtype's real parts run on the real kernels (complex64 on float32, complex128 on
float64), so every method, layout and option of the real passes carries over.
"""

from __future__ import annotations

from cupyconv._core.names import arg

COMPLEX_DTYPES = {"complex64": "float32", "complex128": "float64"}


def is_complex(a) -> bool:
    """Whether array ``a`` (or None) holds complex numbers."""
    return a is not None and a.dtype.kind == "c"


def require_complex_dtype(arrays: dict) -> str:
    """The one complex dtype of ``arrays`` ({name: array or None}), first entry first; a
    TypeError naming the argument where one is real or of the other precision."""
    dtype = first = None
    for name, a in arrays.items():
        if a is None:
            continue
        got = a.dtype.name
        if got not in COMPLEX_DTYPES:
            name = arg(name)
            raise TypeError(f"{name} has dtype {got} but the call is complex: all operands of a "
                            f"complex convolution must share one complex dtype (complex64 or "
                            f"complex128; cast with {name}.astype(cupy.complex64))")
        if dtype is None:
            dtype, first = got, name
        elif got != dtype:
            raise TypeError(f"{arg(name)} has dtype {got} but {arg(first, 'the input')} has "
                            f"dtype {dtype}: all operands of one convolution must share a dtype")
    return dtype


def real_dtype(dtype: str) -> str:
    """The real type that carries the parts of complex ``dtype``."""
    return COMPLEX_DTYPES[dtype]


def refuse_activation(activation) -> None:
    """Activations are defined on real numbers only."""
    if activation is not None:
        raise ValueError(f"activation {activation!r} is not defined for complex data: use "
                         f"activation=None with complex inputs")


def gauss_product(op, a, b, out, *, conj_a: bool = False, conj_b: bool = False):
    """``out[...] = B(a', b')`` for complex CuPy arrays, with ``a' = conj(a)`` if ``conj_a`` (and
    likewise ``b'``), from three calls of the real bilinear ``op(p, q, part)``.

    ``part`` (1, 2 or 3: k1, k2, k3 above) lets the caller fuse a per-channel term into a product:
    ``real = k1 - k3`` and ``imag = k1 + k2``, so a bias ``c`` enters as ``+c.imag`` in part 2 and
    ``-c.real`` in part 3 (valid where neither operand is conjugated, see :func:`bias_parts`).
    ``out`` is a complex array of the result's shape; it is returned.
    """
    import cupy

    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    # With a' = conj(a): a'.imag = -ai, so k1 takes ar - ai and k3, whose left factor is a'.imag,
    # is computed on ai and enters with the opposite sign.  With b' = conj(b) the right
    # factors are (-bi - br) and (br - bi).
    k1 = op(ar - ai if conj_a else ar + ai, br, 1)
    k2 = op(ar, -(bi + br) if conj_b else bi - br, 2)
    k3 = op(ai, br - bi if conj_b else br + bi, 3)
    (cupy.add if conj_a else cupy.subtract)(k1, k3, out=out.real)
    cupy.add(k1, k2, out=out.imag)
    return out


def bias_parts(bias):
    """The real biases of parts 2 and 3 of :func:`gauss_product` that add the complex ``bias``
    (None: no bias) to an unconjugated product: ``(bias.imag, -bias.real)``."""
    if bias is None:
        return {1: None, 2: None, 3: None}
    return {1: None, 2: bias.imag, 3: -bias.real}
