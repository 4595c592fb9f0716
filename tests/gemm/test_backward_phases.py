"""CPU check of the stride-phase decomposition behind backward-data: evaluating dx phase by phase
with the plan's rows, taps, pads and dilations reproduces the float64 reference exactly."""

import itertools

import numpy as np

from cupyconv import reference
from cupyconv._gemm.backward import phase_dims, uncovered_rows


def _dx_by_phases(dy, w, size, stride, dilation, pad_lo):
    out = dy.shape[0]
    dx = np.zeros(size)  # rows of no phase receive no gradient
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
        phases = phase_dims(size, out, k, s, d, lo)
        rows = sorted(ph.first + q * s for ph in phases for q in range(ph.rows))
        assert len(set(rows)) == len(rows) and set(rows) <= set(range(size))
        assert uncovered_rows(size, phases) == size - len(rows)
        assert all(ph.taps for ph in phases)
        w, dy = rng.standard_normal(k), rng.standard_normal(out)
        ref = reference.conv_backward_data(dy[None, None], w[None, None], (1, 1, size), stride=s,
                                           padding=[(lo, hi)], dilation=d)[0, 0]
        np.testing.assert_allclose(_dx_by_phases(dy, w, size, s, d, lo), ref, rtol=1e-12,
                                   atol=1e-12)
        checked += 1
    assert checked > 500


def test_stride_larger_than_kernel_leaves_rows_without_taps():
    phases = phase_dims(9, 3, 2, 4, 1, 0)     # kernel 2, stride 4: two of four phases get nothing
    assert len(phases) == 2
    assert uncovered_rows(9, phases) == 9 - sum(ph.rows for ph in phases) == 4


def test_huge_strides_list_only_the_phases_of_taps():
    """A stride of 2**31 (one dy pixel) must not enumerate 2**31 phases: the hang of issue 14."""
    phases = phase_dims(5, 1, 1, 2 ** 31, 1, 0)
    assert [(ph.first, ph.rows, ph.taps) for ph in phases] == [(0, 1, (0,))]
    assert uncovered_rows(5, phases) == 4
    phases = phase_dims(10 ** 9, 2, 3, 10 ** 9 - 1, 2, 1)
    assert len(phases) <= 3 and all(ph.rows <= 2 for ph in phases)
