"""The seeded random problems of test_gpu_fuzz.py: generation, running, judging.

``generate(seed, index)`` draws one problem (a plain dict: every option, the view layout of every
operand, the method, ``out`` given or not); ``run_problem(problem, xp, lib)`` builds the operands
as views of ``xp`` buffers, calls ``lib`` (``cupyconv`` on the GPU; a NumPy stand-in built from
:mod:`cupyconv.reference` in the CPU self-test) and judges the result against the float64
reference.  A problem is reproduced from its (seed, index) alone:

    python3 -c "import sys; sys.path.insert(0, 'tests'); import cupy, cupyconv, fuzz_problems as f;
                print(f.run_problem(f.generate(SEED, INDEX), cupy, cupyconv))"
"""

from __future__ import annotations

import math
import re

import numpy as np

import cupyconv
from cupyconv import reference
from trust_helpers import describe_view, make_view, poison, rel_error, to_host, tolerance, view_spec

PASSES = ("forward", "backward_data", "backward_weight", "transpose", "separable")
PASS_WEIGHTS = (0.3, 0.2, 0.2, 0.15, 0.15)
FORWARD_METHODS = ("auto", "implicit_gemm", "im2col_gemm", "direct")  # + depthwise, grouped_direct
BACKWARD_METHODS = ("auto", "implicit_gemm")                              # + "depthwise"
SEPARABLE_METHODS = ("auto", "fused", "unfused")
DTYPES = ("float32", "float64", "float16", "bfloat16")
DTYPE_WEIGHTS = (0.45, 0.3, 0.15, 0.1)
PADDING_FORMS = ("int", "per_dim", "pairs", "valid", "same", "same_lower")
TRANSPOSE_PADDING_FORMS = ("int", "per_dim", "pairs")
# ValueErrors the library documents for problems a named method cannot run: those problems are
# counted as skipped, every other exception fails the problem.
SKIP_REASONS = (r"method 'fused' runs 1-d and 2-d problems",
                r"cannot run this problem",
                r"needs groups == input channels")
FP16 = dict(fp16_factor=3.0, fp16_floor=1e-4)
FP16_SEPARABLE = dict(fp16_factor=4.0, fp16_floor=2e-4)


# ------------------------------------------------------------------------------- generation
def _choice(rng, items, p=None):
    return items[int(rng.choice(len(items), p=p))]


def _per_dim_or_int(rng, values, nsp):
    """An int or a per-dim tuple drawn from ``values`` (mostly 1)."""
    if rng.random() < 0.5:
        return int(rng.choice(values))
    return tuple(int(rng.choice(values)) for _ in range(nsp))


def _padding(rng, nsp, forms):
    form = _choice(rng, forms)
    if form == "int":
        return form, int(rng.integers(0, 4))
    if form == "per_dim":
        return form, tuple(int(rng.integers(0, 4)) for _ in range(nsp))
    if form == "pairs":
        pairs = [(int(rng.integers(0, 4)), int(rng.integers(0, 4))) for _ in range(nsp)]
        return form, pairs if rng.random() < 0.5 else tuple(pairs)
    return form, form


def _tuple(v, nsp):
    return (v,) * nsp if isinstance(v, int) else tuple(v)


def _view_kind(rng):
    return _choice(rng, ("contiguous", "random", "flip", "permute", "strided"),
                   p=(0.35, 0.4, 0.1, 0.08, 0.07))


def _draw(rng, seed, index):
    p = dict(seed=seed, index=index)
    p["pass"] = _choice(rng, PASSES, p=PASS_WEIGHTS)
    nsp = int(rng.choice([1, 2, 3], p=[0.3, 0.5, 0.2]))
    p["ndim"] = nsp
    p["dtype"] = _choice(rng, DTYPES, p=DTYPE_WEIGHTS)
    p["layout"] = _choice(rng, ("NCHW", "NHWC"))
    p["n"] = int(rng.integers(1, 4))
    big = 6 if nsp == 3 else 12
    p["spatial"] = tuple(int(rng.integers(1, big + 1)) for _ in range(nsp))
    p["kernel"] = tuple(int(rng.integers(1, (3 if nsp == 3 else 4) + 1)) for _ in range(nsp))
    p["stride"] = _per_dim_or_int(rng, [1, 1, 2, 3], nsp)
    p["dilation"] = _per_dim_or_int(rng, [1, 1, 1, 2, 3], nsp)
    kind = _choice(rng, ("dense", "grouped", "depthwise"), p=(0.4, 0.3, 0.3))
    p["group_kind"] = kind
    if p["pass"] == "separable":
        p["c"] = int(rng.integers(1, 17))
        p["mult"] = int(rng.choice([1, 1, 2, 3]))
        p["kp"] = int(rng.integers(1, 17))
        p["groups"] = p["c"]
        p["k"] = p["c"] * p["mult"]
    elif kind == "dense":
        p["groups"], p["c"], p["k"] = 1, int(rng.integers(1, 17)), int(rng.integers(1, 17))
    elif kind == "grouped":
        g = int(rng.choice([2, 3, 4]))
        p["groups"], p["c"], p["k"] = g, g * int(rng.integers(1, 5)), g * int(rng.integers(1, 5))
    else:   # depthwise, channel multiplier 1-3 (transpose: groups == its output channels)
        c = int(rng.integers(1, 17))
        p["groups"], p["c"], p["k"] = c, c, c * int(rng.choice([1, 1, 2, 3]))
    forms = TRANSPOSE_PADDING_FORMS if p["pass"] == "transpose" else PADDING_FORMS
    p["padding_form"], p["padding"] = _padding(rng, nsp, forms)
    depthwise = p["groups"] == p["c"]
    if p["pass"] == "forward":
        # (the grouped direct kernel refuses kernels of more than 32 taps: a documented skip)
        extra = ("depthwise",) if depthwise else (("grouped_direct",) if kind == "grouped" else ())
        p["method"] = _choice(rng, FORWARD_METHODS + extra)
    elif p["pass"] in ("backward_data", "backward_weight"):
        p["method"] = _choice(rng, BACKWARD_METHODS + (("depthwise",) if depthwise else ()))
    elif p["pass"] == "transpose":
        # forward view of the transpose: input channels c (= the transpose's outputs), weight
        # (k, c/g, *kernel) with k = the transpose's input channels; depthwise: groups == c
        p["method"] = _choice(rng, BACKWARD_METHODS + (("depthwise",) if depthwise else ()))
        s, d = _tuple(p["stride"], nsp), _tuple(p["dilation"], nsp)
        p["output_padding"] = tuple(int(rng.integers(0, max(si, di))) for si, di in zip(s, d))
        if rng.random() < 0.3 and len(set(p["output_padding"])) == 1:
            p["output_padding"] = p["output_padding"][0]
    else:
        p["method"] = _choice(rng, SEPARABLE_METHODS if nsp < 3 else ("auto", "unfused"))
        p["activation"] = _choice(rng, (None, "relu", "relu6"))
    p["bias"] = bool(rng.random() < 0.6) if p["pass"] in ("forward", "transpose") else False
    if p["pass"] == "separable":
        p["bias_dw"], p["bias_pw"] = bool(rng.random() < 0.6), bool(rng.random() < 0.6)
    p["out"] = _choice(rng, (None, "fresh", "offset"), p=(0.4, 0.45, 0.15))
    p["views"] = {}
    for name in ("x", "w", "dy", "w_dw", "w_pw"):
        nd = nsp + 2
        p["views"][name] = view_spec(rng, nd, _view_kind(rng))
    for name in ("bias", "bias_dw", "bias_pw"):
        p["views"][name] = view_spec(rng, 1, _choice(rng, ("contiguous", "flip", "strided", "random")))
    return p


def shapes(p):
    """Host shapes of the problem's operands: dict name -> shape (and "result")."""
    nsp, lay, n, c, k, g = p["ndim"], p["layout"], p["n"], p["c"], p["k"], p["groups"]
    sp, ker = p["spatial"], p["kernel"]

    def act(ch, s):
        return (n, *s, ch) if lay == "NHWC" else (n, ch, *s)

    def wt(a, b, kk):
        return (a, *kk, b) if lay == "NHWC" else (a, b, *kk)

    opts = options(p)
    if p["pass"] == "separable":
        xs, wdw = act(c, sp), wt(k, 1, ker)
        ys = cupyconv.output_shape(xs, wdw, stride=opts["stride"], padding=opts["padding"],
                                   dilation=opts["dilation"], groups=c, layout=lay)
        ones = (1,) * nsp
        res = ys[:-1] + (p["kp"],) if lay == "NHWC" else (ys[0], p["kp"]) + ys[2:]
        return dict(x=xs, w_dw=wdw, w_pw=wt(p["kp"], k, ones), bias_dw=(k,), bias_pw=(p["kp"],),
                    result=res)
    if p["pass"] == "transpose":
        # the transpose's input is the forward output (k channels), its output the forward input
        s, d = _tuple(p["stride"], nsp), _tuple(p["dilation"], nsp)
        pad = p["padding"]
        pairs = ([(pad, pad)] * nsp if isinstance(pad, int) else
                 [(q, q) if isinstance(q, int) else tuple(q) for q in pad])
        op = _tuple(p["output_padding"], nsp)
        out_sp = tuple((i - 1) * si - lo - hi + di * (kk - 1) + o + 1
                       for i, si, (lo, hi), di, kk, o in zip(sp, s, pairs, d, ker, op))
        full = tuple(x - o for x, o in zip(out_sp, op))
        if min(full) < 1:
            raise ValueError("empty transpose output")
        return dict(x=act(k, sp), w=wt(k, c // g, ker), bias=(c,), result=act(c, out_sp))
    xs, ws = act(c, sp), wt(k, c // g, ker)
    ys = cupyconv.output_shape(xs, ws, **opts)
    res = dict(forward=ys, backward_data=xs, backward_weight=ws)[p["pass"]]
    return dict(x=xs, w=ws, dy=ys, bias=(k,), result=res)


def options(p):
    o = dict(stride=p["stride"], padding=p["padding"], dilation=p["dilation"], layout=p["layout"])
    if p["pass"] != "separable":
        o["groups"] = p["groups"]
    if p["pass"] == "transpose":
        o["output_padding"] = p["output_padding"]
    if p["pass"] == "separable":
        o["activation"] = p["activation"]
    return o


def generate(seed: int, index: int) -> dict:
    """Problem ``index`` of the run seeded ``seed`` (valid shapes: redrawn until they are)."""
    rng = np.random.default_rng([seed, index])
    for _ in range(200):
        p = _draw(rng, seed, index)
        try:
            shapes(p)
        except ValueError:
            continue
        return p
    raise RuntimeError(f"no valid problem drawn for seed {seed} index {index}")


# ------------------------------------------------------------------------------------ oracle
def reference_result(p, host):
    """The float64 reference of problem ``p`` on host operands ``host`` (dict of arrays)."""
    o = options(p)
    if p["pass"] == "forward":
        return reference.conv(host["x"], host["w"], host.get("bias"), **o)
    if p["pass"] == "backward_data":
        return reference.conv_backward_data(host["dy"], host["w"], shapes(p)["x"], **o)
    if p["pass"] == "backward_weight":
        return reference.conv_backward_weight(host["x"], host["dy"], shapes(p)["w"], **o)
    if p["pass"] == "transpose":
        return reference.conv_transpose(host["x"], host["w"], host.get("bias"), **o)
    act = o.pop("activation")
    t = reference.conv(host["x"], host["w_dw"], host.get("bias_dw"), groups=p["c"], **o)
    if act == "relu":
        t = np.maximum(t, 0.0)
    elif act == "relu6":
        t = np.clip(t, 0.0, 6.0)
    return reference.conv(t, host["w_pw"], host.get("bias_pw"), layout=p["layout"])


def operand_names(p):
    names = {"forward": ["x", "w"], "backward_data": ["dy", "w"], "backward_weight": ["x", "dy"],
             "transpose": ["x", "w"], "separable": ["x", "w_dw", "w_pw"]}[p["pass"]]
    if p.get("bias"):
        names.append("bias")
    if p["pass"] == "separable":
        names += [b for b in ("bias_dw", "bias_pw") if p[b]]
    return names


def describe(p, views=None) -> str:
    keys = ("pass", "dtype", "layout", "ndim", "n", "c", "k", "groups", "group_kind", "spatial",
            "kernel", "stride", "dilation", "padding_form", "padding", "output_padding", "mult",
            "kp", "activation", "method", "bias", "bias_dw", "bias_pw", "out")
    lines = [f"fuzz problem seed={p['seed']} index={p['index']} (CUPYCONV_FUZZ_SEED={p['seed']}): "
             + ", ".join(f"{k}={p[k]!r}" for k in keys if k in p)]
    try:
        lines.append(f"  shapes: {shapes(p)}")
    except ValueError as exc:
        lines.append(f"  shapes: invalid ({exc})")
    for name in operand_names(p):
        lines.append(f"  {name}: spec={p['views'][name]}"
                     + (f" view {describe_view(views[name])}" if views and name in views else ""))
    lines.append(f"  reproduce: fuzz_problems.run_problem(fuzz_problems.generate({p['seed']}, "
                 f"{p['index']}), cupy, cupyconv)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- running
def _call(p, lib, ops, out):
    o = options(p)
    m = p["method"]
    if p["pass"] == "forward":
        return lib.conv(ops["x"], ops["w"], ops.get("bias"), method=m, out=out, **o)
    if p["pass"] == "backward_data":
        return lib.conv_backward_data(ops["dy"], ops["w"], shapes(p)["x"], method=m, out=out, **o)
    if p["pass"] == "backward_weight":
        return lib.conv_backward_weight(ops["x"], ops["dy"], shapes(p)["w"], method=m, out=out,
                                        **o)
    if p["pass"] == "transpose":
        return lib.conv_transpose(ops["x"], ops["w"], ops.get("bias"), method=m, out=out, **o)
    return lib.separable_conv(ops["x"], ops["w_dw"], ops["w_pw"], ops.get("bias_dw"),
                              ops.get("bias_pw"), method=m, out=out, **o)


def run_problem(p, xp, lib):
    """Run problem ``p``; return ("ran", error, tol), ("skipped", reason) or ("failed", message)."""
    rng = np.random.default_rng([p["seed"], p["index"], 7])
    shp = shapes(p)
    dtype = p["dtype"]
    host = {}
    for name in operand_names(p):
        a = rng.uniform(-1.0, 1.0, size=shp[name])
        if name == "x" and p.get("activation") == "relu6":
            a = 4.0 * a            # intermediate values above 6: the clip is exercised
        host[name] = a.astype(dtype)
    views = {name: make_view(xp, host[name], p["views"][name]) for name in host}
    ref = reference_result(p, host)
    out = None
    if p["out"] == "fresh":
        out = poison(xp.empty(shp["result"], dtype=dtype))
    elif p["out"] == "offset":   # C-contiguous, one element past an allocation's start
        out = poison(xp.empty(math.prod(shp["result"]) + 1, dtype=dtype))[1:].reshape(shp["result"])
    try:
        got = _call(p, lib, views, out)
    except ValueError as exc:
        if any(re.search(r, str(exc)) for r in SKIP_REASONS):
            return ("skipped", str(exc))
        return ("failed", f"unexpected ValueError: {exc}\n{describe(p, views)}")
    except Exception as exc:  # noqa: BLE001 - reported with the problem
        return ("failed", f"{type(exc).__name__}: {exc}\n{describe(p, views)}")
    problems = []
    if out is not None and got is not out:
        problems.append("result is not the given out array")
    if tuple(got.shape) != tuple(ref.shape) or got.dtype != np.dtype(dtype):
        problems.append(f"result shape/dtype {tuple(got.shape)} {got.dtype}, expected "
                        f"{tuple(ref.shape)} {dtype}")
    fp16 = FP16_SEPARABLE if p["pass"] == "separable" else FP16
    tol = tolerance(dtype, ref, **fp16)
    err = rel_error(got, ref)
    if not err <= tol:
        problems.append(f"relative error {err:.3e} > tolerance {tol:.1e}")
    for name, v in views.items():
        if not np.array_equal(to_host(v), host[name]):
            problems.append(f"input {name} was modified")
    if problems:
        return ("failed", "; ".join(problems) + "\n" + describe(p, views))
    return ("ran", err, tol)
