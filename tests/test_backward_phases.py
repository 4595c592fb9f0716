"""CPU check of the stride-phase decomposition behind backward-data: evaluating dx phase by phase
with the plan's rows, taps, pads and dilations reproduces the float64 reference exactly."""

import itertools

import numpy as np

from cupyconv import reference
from cupyconv._backward import phase_dims


def _dx_by_phases(dy, w, size, stride, dilation, pad_lo):
    out = dy.shape[0]
    dx = np.full(size, np.nan)
    for ph in phase_dims(size, out, w.shape[0], stride, dilation, pad_lo):
        for q in range(ph.rows):
            acc = 0.0
            for j, t in enumerate(ph.taps):        # taps in flipped order: a unit-stride conv
                p = q - ph.pad + j * ph.dilation
                if 0 <= p < out:
                    acc += dy[p] * w[t]
            dx[ph.first + q * stride] = acc
    return dx


def test_every_row_is_in_exactly_one_phase_and_the_sums_match_the_reference():
    rng = np.random.default_rng(0)
    checked = 0
    for size, k, s, d, lo, hi in itertools.product((5, 8, 9, 12), (1, 2, 3, 4, 5), (1, 2, 3, 4),
                                                  (1, 2, 3), (0, 1, 2, 4), (0, 3)):
        if (k - 1) * d + 1 > size + lo + hi:
            continue
        out = (size + lo + hi - (k - 1) * d - 1) // s + 1
        rows = sorted(ph.first + q * s for ph in phase_dims(size, out, k, s, d, lo)
                      for q in range(ph.rows))
        assert rows == list(range(size))
        w, dy = rng.standard_normal(k), rng.standard_normal(out)
        ref = reference.conv_backward_data(dy[None, None], w[None, None], (1, 1, size), stride=s,
                                           padding=[(lo, hi)], dilation=d)[0, 0]
        np.testing.assert_allclose(_dx_by_phases(dy, w, size, s, d, lo), ref, rtol=1e-12,
                                   atol=1e-12)
        checked += 1
    assert checked > 500


def test_stride_larger_than_kernel_leaves_phases_without_taps():
    phases = phase_dims(9, 3, 2, 4, 1, 0)     # kernel 2, stride 4: two of four phases get nothing
    assert sum(1 for ph in phases if not ph.taps) == 2
