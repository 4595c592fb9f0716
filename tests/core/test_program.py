"""CPU tests of the prepared-call machinery's pure parts: argument packing of a recorded launch
(natural alignment, as the kernel ABI lays parameters out; tensor maps as AddressArgs, encoded
again when a replay's operand moves), the refusal of arguments a replay
could not reproduce, the strided-copy dim merging and transpose detection, and the strided copy's
division by magic numbers."""

import itertools
import math
import types

import numpy as np
import pytest

from cupyconv._core.copy import _merged, _transposed_pair, magic_divisor
from cupyconv._core.program import Recorder


class _FakeKernel:
    kernel = types.SimpleNamespace(ptr=0x1234)


def _record(args):
    rec = Recorder(())
    rec.launch(_FakeKernel(), (2,), (64,), args, 0)
    return rec


def test_scalars_are_packed_at_their_natural_alignment():
    rec = _record((np.int32(7), np.int64(-3), np.int32(9), np.float32(1.5), np.float64(2.5),
                   np.bool_(True), np.int64(11)))
    assert rec.failure is None
    (step,) = rec.steps
    raw = step.storage.tobytes()
    # int32 @0, int64 @8, int32 @16, float32 @20, float64 @24, bool @32, int64 @40
    offsets = [int(p) - step.storage.ctypes.data for p in step.params]
    assert offsets == [0, 8, 16, 20, 24, 32, 40]
    assert np.frombuffer(raw[0:4], np.int32)[0] == 7
    assert np.frombuffer(raw[8:16], np.int64)[0] == -3
    assert np.frombuffer(raw[20:24], np.float32)[0] == 1.5
    assert np.frombuffer(raw[24:32], np.float64)[0] == 2.5
    assert raw[32] == 1
    assert np.frombuffer(raw[40:48], np.int64)[0] == 11
    assert step.grid == (2, 1, 1) and step.block == (64, 1, 1) and step.fptr == 0x1234
    assert step.slots == []


@pytest.mark.parametrize("arg", [7, 2.0, True, "x", np.complex64(1)])
def test_arguments_of_unknown_width_fail_the_recording(arg):
    rec = _record((np.int32(1), arg))
    assert rec.failure is not None and not rec.steps
    assert rec.program(outputs=()) is None


def test_a_failed_recording_records_nothing_more():
    rec = _record((1.0,))
    rec.launch(_FakeKernel(), (1,), (1,), (np.int32(1),), 0)
    assert rec.steps == [] and rec.program(outputs=()) is None


@pytest.mark.parametrize("shape,src,dst,want", [
    ((4, 5, 6), (30, 6, 1), (30, 6, 1), [(120, 1, 1)]),            # contiguous: one run
    ((4, 5, 6), (1, 4, 20), (30, 6, 1), [(4, 1, 30), (5, 4, 6), (6, 20, 1)]),  # a transpose
    ((3, 1, 7), (7, 99, 1), (14, 5, 2), [(21, 1, 2)]),    # extent-1 dims drop, then one run
    ((2, 3, 4), (24, 8, 2), (12, 4, 1), [(24, 2, 1)]),    # strided but uniform in both: one run
    ((2, 3, 4), (24, 8, 2), (12, 1, 3), [(2, 24, 12), (3, 8, 1), (4, 2, 3)]),  # no merge
])
def test_copy_dims_merge_runs_that_are_one_run_in_both_arrays(shape, src, dst, want):
    assert _merged(shape, src, dst) == want


@pytest.mark.parametrize("dims,want", [
    ([(32, 1, 64), (64, 32, 1)], (0, 1)),                     # a 2-d transpose
    ([(8, 4096, 4096), (64, 1, 64), (64, 64, 1)], (1, 2)),    # batched: NCHW -> NHWC
    ([(8, 4096, 4096), (64, 64, 1), (64, 1, 64)], (2, 1)),    # NHWC -> NCHW
    ([(120, 1, 1)], None),                                    # contiguous in both along one dim
    ([(3, 1, 64), (64, 3, 1)], None),                         # 3 channels: too short to tile
    ([(32, 2, 64), (64, 64, 1)], None),                       # src has no unit-stride dim
])
def test_copies_that_transpose_take_the_tiled_kernel(dims, want):
    assert _transposed_pair(dims) == want


@pytest.mark.parametrize("shape,perm", [((2, 40, 17, 33), (0, 2, 3, 1)), ((3, 50, 70), (2, 0, 1)),
                                        ((40, 16), (1, 0)), ((2, 3, 33, 17, 20), (4, 1, 0, 3, 2))])
def test_tiled_transpose_indexing_matches_the_copy(shape, perm):
    """transpose_copy's index arithmetic (tile walk, outer dims) emulated on the host."""
    a = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    src = a.transpose(perm)
    dst = np.empty(src.shape, np.float32)
    dims = _merged(src.shape, [s // 4 for s in src.strides], [s // 4 for s in dst.strides])
    pair = _transposed_pair(dims)
    assert pair is not None
    ia, ib = pair
    outer = [d for i, d in enumerate(dims) if i not in pair]
    ext, ss, ds = zip(*([(1, 0, 0)] * (4 - len(outer)) + outer))
    flat, out = a.ravel(), np.full(dst.size, np.nan, np.float32)
    ea, eb = dims[ia][0], dims[ib][0]
    ai, bi = np.meshgrid(np.arange(ea), np.arange(eb), indexing="ij")
    for idx in itertools.product(*(range(e) for e in ext)):
        so = sum(i * s for i, s in zip(idx, ss))
        do = sum(i * s for i, s in zip(idx, ds))
        out[do + ai * dims[ia][2] + bi] = flat[so + ai + bi * dims[ib][1]]
    np.testing.assert_array_equal(out.reshape(dst.shape), src)


def _magic_quotient(n: int, d: int) -> int:
    mul, shr = magic_divisor(d)
    return n if mul == 0 else ((n * mul) >> 32) >> shr


def test_magic_division_is_exact_below_2_31():
    """strided_copy's quotient umulhi(n, mul) >> shr against n // d: every n up to 3d for
    d < 2000, the top of the range, multiples and their neighbours, and random pairs."""
    top = 2 ** 31 - 1
    for d in range(1, 2000):
        mul, _ = magic_divisor(d)
        assert 0 <= mul < 2 ** 32
        for n in itertools.chain(range(3 * d + 2), (top, top - 1, top // d * d, top // d * d - 1)):
            assert _magic_quotient(n, d) == n // d, (n, d)
    rng = np.random.default_rng(7)
    for d, n in zip(rng.integers(1, 2 ** 31, 20000), rng.integers(0, 2 ** 31, 20000)):
        d, n = int(d), int(n)
        for v in (n, n // d * d, max(0, n // d * d - 1), top):
            assert _magic_quotient(v, d) == v // d, (v, d)
    with pytest.raises(ValueError, match="2\\^31"):
        magic_divisor(2 ** 31)


@pytest.mark.parametrize("shape,perm,step", [((3, 5, 7, 2), (0, 2, 1, 3), 1),
                                             ((4, 6, 9), (2, 1, 0), 2), ((2, 3, 4, 5, 6, 7), None, 1)])
def test_strided_copy_decode_with_magic_numbers(shape, perm, step):
    """strided_copy's narrow path emulated on the host: each element's (src, dst) offsets from
    its index decoded with the magic divisions equal the views' own element offsets."""
    a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    src = a if perm is None else a.transpose(perm)
    src = src[..., ::step]
    dst = np.full(src.shape, -1, np.int64)
    dims = _merged(src.shape, [s // 8 for s in src.strides], [s // 8 for s in dst.strides])
    ext, ss, ds = zip(*([(1, 0, 0)] * (6 - len(dims)) + dims))
    base = src.__array_interface__["data"][0] - a.__array_interface__["data"][0]
    flat, out = a.ravel(), dst.ravel()
    for idx in range(src.size):
        r, so, do = idx, 0, 0
        for e, s_, d_ in zip(reversed(ext), reversed(ss), reversed(ds)):
            q = _magic_quotient(r, e)
            i = r - q * e
            r, so, do = q, so + i * s_, do + i * d_
        out[do] = flat[base // 8 + so]
    np.testing.assert_array_equal(dst, src)


def _fake_array(ptr, nbytes=4096):
    return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr), shape=(nbytes // 2,),
                                 strides=(2,), itemsize=2)


def test_an_address_argument_is_re_encoded_on_replay_only_when_its_address_moves():
    """A tensor map (program.AddressArg) is laid out at a 64-byte aligned offset in the argument
    bytes; a replay writes ``encode(new address)`` there when the operand sits elsewhere, and
    leaves it alone (no encode) when it does not."""
    from cupyconv._core.program import AddressArg

    encoded = []

    def encode(ptr):
        encoded.append(ptr)
        return np.full(16, ptr, dtype=np.uint64)  # 128 bytes that name the address

    x = _fake_array(0x10000)
    rec = Recorder((x,))
    arg = AddressArg(x, encode)
    rec.launch(_FakeKernel(), (1,), (384,), (np.int32(5), arg, np.int32(6)), 0)
    assert rec.failure is None
    (step,) = rec.steps
    offsets = [int(p) - step.storage.ctypes.data for p in step.params]
    assert offsets == [0, 64, 192]  # int32, the map at the next 64-byte boundary, int32
    words = lambda: step.storage[64:192].view(np.uint64)  # noqa: E731
    assert (words() == 0x10000).all() and encoded == [0x10000]
    calls = []
    launch = lambda *a: calls.append(a)  # noqa: E731
    step.run([0x20000], 0, launch)  # the operand moved: encoded for its new address
    assert (words() == 0x20000).all() and encoded == [0x10000, 0x20000]
    step.run([0x20000], 0, launch)  # same address: nothing to encode
    assert encoded == [0x10000, 0x20000] and len(calls) == 2
    assert np.frombuffer(step.storage[192:196].tobytes(), np.int32)[0] == 6


def test_the_kernel_call_passes_an_address_argument_by_its_value(monkeypatch):
    from cupyconv._core import program
    from cupyconv._core.program import AddressArg, Kernel

    monkeypatch.setattr(program._THREAD, "bound", True, raising=False)  # (no device here)

    seen = []

    class Raw:
        def __call__(self, grid, block, args, shared_mem=0):
            seen.append(args)

    value = np.zeros(16, np.uint64)
    arg = AddressArg(_fake_array(0x30000), lambda ptr: value)
    Kernel(Raw())((1,), (1,), (np.int32(1), arg))
    assert seen[0][0] == 1 and seen[0][1] is value
