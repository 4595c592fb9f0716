"""CPU self-tests of the trust/fuzz helpers (trust_helpers.py, fuzz_problems.py): the views they
build, the problems they draw, the oracles they compare with, and the whole fuzz harness run on
NumPy against a stand-in library built from cupyconv.reference.  No GPU needed."""

import collections

import ml_dtypes
import numpy as np
import pytest

import cupyconv
from cupyconv import reference

import fuzz_problems as fz
from trust_helpers import (boundary_rows, chunked_check, crop_rows_check, make_view, rel_error,
                           tolerance, view_spec)


# ------------------------------------------------------------------------------------- views
@pytest.mark.parametrize("kind", ["contiguous", "random", "flip", "permute", "strided"])
def test_make_view_holds_the_values_with_the_drawn_layout(kind):
    rng = np.random.default_rng(1)
    for trial in range(60):
        nd = int(rng.integers(1, 6))
        shape = tuple(int(rng.integers(1, 5)) for _ in range(nd))
        host = rng.uniform(-1, 1, size=shape).astype(rng.choice(["float16", "bfloat16", "float32",
                                                                 "float64"]))
        spec = view_spec(rng, nd, kind)
        v = make_view(np, host, spec)
        assert v.shape == host.shape and v.dtype == host.dtype
        assert np.array_equal(v, host)
        base = v.base if v.base is not None else v
        while getattr(base, "base", None) is not None:
            base = base.base
        # everything outside the view is NaN (a kernel reading outside it gets NaN)
        assert int(np.isnan(base).sum()) == base.size - v.size
        for ax in range(nd):
            if shape[ax] > 1 and ax in spec["flip"]:
                assert v.strides[ax] < 0
            elif shape[ax] > 1:
                assert v.strides[ax] > 0
        if kind == "contiguous":
            assert v.flags.c_contiguous
        if kind == "flip":
            assert spec["flip"]


def test_make_view_permuted_layout_is_a_transpose_of_a_contiguous_buffer():
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    spec = dict(perm=[2, 0, 1], flip=[1], step=[1, 1, 1], margin=[0, 0, 0], offset=0)
    v = make_view(np, host, spec)
    assert np.array_equal(v, host)
    assert v.strides[2] > v.strides[0] > 0 > v.strides[1]   # last logical axis outermost


# ---------------------------------------------------------------------------------- problems
def test_problems_are_reproducible_and_valid():
    a = [fz.generate(123, i) for i in range(50)]
    b = [fz.generate(123, i) for i in range(50)]
    assert a == b
    assert a != [fz.generate(124, i) for i in range(50)]
    for p in a:
        fz.shapes(p)   # valid shapes


def test_problem_mix_covers_every_option():
    probs = [fz.generate(20240607, i) for i in range(600)]
    seen = collections.defaultdict(set)
    for p in probs:
        for key in ("pass", "ndim", "layout", "dtype", "group_kind", "out", "padding_form"):
            seen[key].add(p[key])
        seen[p["pass"] + ":method"].add(p["method"])
        seen["activation"].add(p.get("activation", "-"))
        seen["flip"].add(bool(p["views"]["x"]["flip"]))
        seen["perm"].add(p["views"]["x"]["perm"] != sorted(p["views"]["x"]["perm"]))
        if p["pass"] == "separable":
            seen["sep-ndim"].add((p["ndim"], p["method"]))
        if p["groups"] == p["c"] and p["k"] > p["c"]:
            seen["multiplier"].add(p["pass"])
    assert seen["pass"] == set(fz.PASSES)
    assert seen["ndim"] == {1, 2, 3} and seen["layout"] == {"NCHW", "NHWC"}
    assert seen["dtype"] == set(fz.DTYPES)
    assert seen["group_kind"] == {"dense", "grouped", "depthwise"}
    assert seen["out"] == {None, "fresh", "offset"}
    assert seen["padding_form"] == set(fz.PADDING_FORMS)
    assert seen["forward:method"] == set(fz.FORWARD_METHODS) | {"depthwise", "grouped_direct"}
    for ps in ("backward_data", "backward_weight", "transpose"):
        assert seen[ps + ":method"] == {"auto", "implicit_gemm", "depthwise"}
    assert seen["separable:method"] == set(fz.SEPARABLE_METHODS)
    assert {(1, "fused"), (2, "fused"), (3, "unfused")} <= seen["sep-ndim"]
    assert seen["activation"] >= {None, "relu", "relu6"}
    assert seen["flip"] == {True, False} and seen["perm"] == {True, False}
    assert {"forward", "backward_data", "backward_weight"} <= seen["multiplier"]
    # transposes take only ints / per-dim / pairs
    assert all(p["padding_form"] in fz.TRANSPOSE_PADDING_FORMS for p in probs if p["pass"] == "transpose")


# -------------------------------------------------------- the harness on a NumPy stand-in
class RefLib:
    """cupyconv's signatures on NumPy, computed by cupyconv.reference (and rounded to the dtype)."""

    def __init__(self, corrupt=False):
        self.corrupt = corrupt

    def _finish(self, r, out, dtype):
        r = np.asarray(r).astype(dtype)
        if self.corrupt:
            r.flat[r.size // 2] += 0.5
        if out is None:
            return r
        assert out.flags.c_contiguous and out.shape == r.shape and out.dtype == r.dtype
        out[...] = r
        return out

    def conv(self, x, w, bias=None, *, method, out, **o):
        assert method in fz.FORWARD_METHODS + ("depthwise", "grouped_direct")
        return self._finish(reference.conv(x, w, bias, **o), out, x.dtype)

    def conv_backward_data(self, dy, w, input_shape, *, method, out, **o):
        return self._finish(reference.conv_backward_data(dy, w, input_shape, **o), out, dy.dtype)

    def conv_backward_weight(self, x, dy, weight_shape, *, method, out, **o):
        return self._finish(reference.conv_backward_weight(x, dy, weight_shape, **o), out, x.dtype)

    def conv_transpose(self, x, w, bias=None, *, method, out, **o):
        return self._finish(reference.conv_transpose(x, w, bias, **o), out, x.dtype)

    def separable_conv(self, x, w_dw, w_pw, bias_dw=None, bias_pw=None, *, method, out,
                       activation, layout, **o):
        if method == "fused" and x.ndim == 5:
            raise ValueError("method 'fused' runs 1-d and 2-d problems whose input window fits "
                             "in shared memory; use method='auto' or 'unfused'")
        c = x.shape[-1] if layout == "NHWC" else x.shape[1]
        t = reference.conv(x, w_dw, bias_dw, groups=c, layout=layout, **o)
        t = t.astype(x.dtype).astype(np.float64)        # an unfused 2-byte intermediate
        t = np.maximum(t, 0) if activation == "relu" else np.clip(t, 0, 6) if activation else t
        return self._finish(reference.conv(t, w_pw, bias_pw, layout=layout), out, x.dtype)


def test_fuzz_harness_passes_a_correct_library():
    results = collections.Counter()
    for i in range(250):
        p = fz.generate(7, i)
        r = fz.run_problem(p, np, RefLib())
        assert r[0] != "failed", r[1]
        results[r[0]] += 1
    assert results["ran"] >= 0.9 * 250


def test_fuzz_harness_reports_a_wrong_result_with_the_whole_problem():
    failed = 0
    for i in range(40):
        r = fz.run_problem(fz.generate(7, i), np, RefLib(corrupt=True))
        if r[0] == "failed":
            failed += 1
            msg = r[1]
            assert "seed=7" in msg and f"index={i}" in msg and "elem_strides" in msg
            assert "relative error" in msg and "method=" in msg and "shapes:" in msg
    assert failed >= 38    # (a result of one element can hide the corruption in rounding)


def test_fuzz_harness_counts_documented_refusals_as_skips():
    class Refusing(RefLib):
        def conv(self, *a, **k):
            raise ValueError("method 'direct' cannot run this problem (...); use method='auto'")

    class Wrong(RefLib):
        def conv(self, *a, **k):
            raise ValueError("something undocumented")

    p = next(fz.generate(3, i) for i in range(100) if fz.generate(3, i)["pass"] == "forward")
    assert fz.run_problem(p, np, Refusing())[0] == "skipped"
    assert fz.run_problem(p, np, Wrong())[0] == "failed"


# ------------------------------------------------------------------- reference identities
def test_reference_adjoint_identity_on_fuzz_problems():
    rng = np.random.default_rng(5)
    done = 0
    for i in range(300):
        p = fz.generate(11, i)
        if p["pass"] not in ("forward", "backward_data", "backward_weight"):
            continue
        s, o = fz.shapes(p), fz.options(p)
        x, w, dy = (rng.uniform(-1, 1, size=s[k]) for k in ("x", "w", "dy"))
        lhs = np.vdot(reference.conv(x, w, **o), dy)
        assert np.vdot(x, reference.conv_backward_data(dy, w, s["x"], **o)) == pytest.approx(lhs)
        assert np.vdot(w, reference.conv_backward_weight(x, dy, s["w"], **o)) == pytest.approx(lhs)
        done += 1
    assert done > 100


def test_reference_transpose_is_backward_data_plus_bias():
    rng = np.random.default_rng(6)
    for i in range(300):
        p = fz.generate(12, i)
        if p["pass"] != "transpose" or p["output_padding"] not in (0, (0,) * p["ndim"]):
            continue
        s, o = fz.shapes(p), fz.options(p)
        x, w, b = (rng.uniform(-1, 1, size=s[k]) for k in ("x", "w", "bias"))
        y = reference.conv_transpose(x, w, b, **o)
        o.pop("output_padding")
        o["padding"] = [(q, q) if isinstance(q, int) else tuple(q) for q in
                        ([o["padding"]] * p["ndim"] if isinstance(o["padding"], int) else o["padding"])]
        dx = reference.conv_backward_data(x, w, s["result"], **o)
        bias = b if p["layout"] == "NHWC" else b.reshape((-1,) + (1,) * p["ndim"])
        np.testing.assert_allclose(y, dx + bias, atol=1e-12)


def test_separable_oracle_equals_one_dense_conv():
    """Without activation, depthwise then pointwise is one dense conv with weight
    w_pw[k, j] * w_dw[j, tap] summed over the j of each input channel, bias w_pw @ b_dw + b_pw."""
    rng = np.random.default_rng(8)
    checked = 0
    for i in range(400):
        p = fz.generate(13, i)
        if p["pass"] != "separable" or p["layout"] != "NCHW":
            continue
        p = dict(p, activation=None, bias_dw=True, bias_pw=True)
        s = fz.shapes(p)
        host = {k: rng.uniform(-1, 1, size=s[k]) for k in ("x", "w_dw", "w_pw", "bias_dw", "bias_pw")}
        y = fz.reference_result(p, host)
        c, m = p["c"], p["mult"]
        wpw = host["w_pw"].reshape(p["kp"], c, m)
        wdw = host["w_dw"].reshape((c, m) + p["kernel"])
        dense = np.einsum("kcm,cm...->kc...", wpw, wdw)
        bias = host["w_pw"].reshape(p["kp"], -1) @ host["bias_dw"] + host["bias_pw"]
        o = fz.options(p)
        o.pop("activation")
        np.testing.assert_allclose(y, reference.conv(host["x"], dense, bias, **o), atol=1e-10)
        checked += 1
    assert checked > 10


# --------------------------------------------------------- huge-problem checks, small scale
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("c,k", [(1, 1), (2, 2), (2, 3)])
def test_chunked_and_crop_checks_agree_with_the_reference(layout, c, k):
    rng = np.random.default_rng(9)
    h, wd = 29, 13
    xs = (1, c, h, wd) if layout == "NCHW" else (1, h, wd, c)
    ws = (k, c, 3, 3) if layout == "NCHW" else (k, 3, 3, c)
    x = rng.uniform(-1, 1, size=xs).astype(np.float32)
    w = rng.uniform(-1, 1, size=ws).astype(np.float32)
    y = reference.conv(x, w, padding=1, layout=layout)
    dy = rng.uniform(-1, 1, size=y.shape).astype(np.float32)
    dx = reference.conv_backward_data(dy, w, xs, padding=1, layout=layout)
    dw = reference.conv_backward_weight(x, dy, ws, padding=1, layout=layout)
    for op, res, a, b in (("forward", y, x, None), ("backward_data", dx, dy, None),
                          ("backward_weight", dw, x, dy)):
        num, den = chunked_check(np, op, res, a, b, w, layout, rows_per_chunk=6)
        assert num / den < 1e-12, op
        bad = res.copy()
        bad.flat[-1] += 1.0
        num, den = chunked_check(np, op, bad, a, b, w, layout, rows_per_chunk=6)
        assert num / den > 1e-4, op
    rows = list(range(h))
    assert crop_rows_check("forward", y, x, None, w, layout, rows) < 1e-12
    assert crop_rows_check("backward_data", dx, dy, None, w, layout, rows) < 1e-12
    bad = dx.copy()
    bad[(0, h - 1) if layout == "NHWC" else (0, 0, h - 1)] += 1.0
    assert crop_rows_check("backward_data", bad, dy, None, w, layout, [h - 1]) > 1e-3
    assert crop_rows_check("backward_data", bad, dy, None, w, layout, [0, 5]) < 1e-12


def test_boundary_rows_find_the_32_bit_crossing():
    # NCHW (1, 2, 10, 7), limit 100: channel 1 starts at 70, crossing at row (100-70)//7 = 4
    assert {3, 4, 5} <= set(boundary_rows(10, 7, 2, "NCHW", limit=100))
    # NHWC (1, 10, 7, 2): 14 elements a row, crossing at row 7
    assert {6, 7, 8} <= set(boundary_rows(10, 7, 2, "NHWC", limit=100))
    rows = boundary_rows(46341, 46341, 1, "NCHW")
    assert 2 ** 31 // 46341 in rows and 46340 in rows and 0 in rows


def test_tolerances_follow_the_suite():
    ref = np.linspace(-1, 1, 101)
    assert tolerance("float32", ref) == 1e-5 and tolerance("float64", ref) == 1e-12
    t16 = tolerance("float16", ref)
    assert 1e-6 < t16 < 1e-3
    assert rel_error(ref.astype(np.float16), ref) <= t16
    tbf16 = tolerance("bfloat16", ref)          # 3 fewer mantissa bits than float16
    assert 4 * t16 < tbf16 < 1e-2
    assert rel_error(ref.astype(ml_dtypes.bfloat16), ref) <= tbf16
    assert tolerance(ml_dtypes.bfloat16, ref) == tbf16
    assert rel_error(np.full(101, np.nan), ref) == float("inf")
    assert cupyconv.output_shape((1, 1, 5, 5), (1, 1, 3, 3), padding=1) == (1, 1, 5, 5)
