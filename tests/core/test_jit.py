"""The JIT layer on the CPU: source assembly, cache keys, compile-once under concurrency."""

import threading
import time

import pytest

from cupyconv._core import jit
from cupyconv._core.kernel_module import CTYPES, KernelModule, load_source
from cupyconv._core.kernels import (DIRECT_CONV, FILTER_DTYPES, PLANE_DTYPES, REGISTRY, TMA_DTYPES,
                                    TMA_TF32_DTYPE)


def test_sources_inline_local_includes_once():
    code = load_source("direct/direct_conv.cu")
    assert "#include \"common.cuh\"" not in code
    assert code.count("// ---- common/common.cuh") == 1   # the header, inlined exactly once
    assert "direct_conv" in code


def test_defines_and_name_expressions_are_part_of_the_module():
    m = KernelModule("gemm/im2col.cu", ("im2col",), ("float32",), (("TILE", 64),))
    assert m.code.startswith("#define TILE 64\n")
    assert m.name_expressions == ("im2col<float>",)
    assert m != KernelModule("gemm/im2col.cu", ("im2col",), ("float32",), (("TILE", 32),))
    assert hash(m) == hash(KernelModule("gemm/im2col.cu", ("im2col",), ("float32",), (("TILE", 64),)))


def test_registry_covers_every_dtype_and_is_unique():
    by_source = {}
    for m in REGISTRY:
        by_source.setdefault(m.source, set()).update(m.dtypes)
        for ne in m.name_expressions:
            assert ne.split("<")[0] in m.templates
    # the signal API's filter kernels have their own compute types (complex, wrapping integers);
    # the Hopper TMA GEMM is 16-bit, and float32 for TF32 products
    expected = {"signal/filter_direct.cu": set(FILTER_DTYPES), "signal/filter_plane.cu": set(PLANE_DTYPES),
                "gemm/gemm_tma.cu": set(TMA_DTYPES) | {TMA_TF32_DTYPE}}
    assert all(d == expected.get(src, set(CTYPES)) for src, d in by_source.items()), by_source
    assert len(set(REGISTRY)) == len(REGISTRY)


def test_tile_and_variant_are_template_arguments():
    from cupyconv._core.kernels import conv_fprop_module

    from cupyconv._core.kernels import MATH_MMA

    m = conv_fprop_module("float16", (64, 64, 16, 4, 4), (1,))
    assert m.name_expressions == ("conv_fprop<__half, 64, 64, 16, 4, 4, 1, 0>",)
    m = conv_fprop_module("bfloat16", (64, 64, 32, 4, 4), (0,), MATH_MMA)  # main loop kind last
    assert m.name_expressions == ("conv_fprop<cc::bf16, 64, 64, 32, 4, 4, 0, 1>",)


def test_missing_source_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="nope.cu"):
        load_source("nope.cu")


class _FakeRawModule:
    compiles = 0
    lock = threading.Lock()

    def __init__(self, code, options, name_expressions):
        self.names = name_expressions

    def compile(self):
        time.sleep(0.05)  # widen the race window
        with _FakeRawModule.lock:
            _FakeRawModule.compiles += 1

    def get_function(self, name):
        assert name in self.names
        return name


def test_concurrent_first_calls_compile_once(monkeypatch):
    import cupy

    monkeypatch.setattr(cupy, "RawModule", _FakeRawModule)
    monkeypatch.setattr(jit, "_target", lambda: ("nvrtc", "sm_90", 0))
    monkeypatch.setattr(jit, "bind_thread_context", lambda: None)  # no device
    jit.clear_cache()
    _FakeRawModule.compiles = 0
    got = []
    threads = [threading.Thread(target=lambda: got.append(
        jit.get_function(DIRECT_CONV, "direct_conv", "float32"))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [k.raw for k in got] == ["direct_conv<float>"] * 16
    assert _FakeRawModule.compiles == 1
    info = jit.cache_info()
    assert info["misses"] == 1 and info["hits"] == 15
    assert info["modules"][0]["source"] == "direct/direct_conv.cu"
    assert info["modules"][0]["arch"] == "sm_90"
    # another arch is another binary
    monkeypatch.setattr(jit, "_target", lambda: ("nvrtc", "sm_80", 0))
    monkeypatch.setattr(jit, "bind_thread_context", lambda: None)  # no device
    jit.get_function(DIRECT_CONV, "direct_conv", "float16")
    assert _FakeRawModule.compiles == 2
    jit.clear_cache()
    assert jit.cache_info() == {"hits": 0, "misses": 0, "modules": []}


def test_shared_constants_are_defined_once_for_python_and_the_kernels():
    """Every KERNEL_CONSTANTS entry is used by some kernel source and reaches, as a define, every
    module whose source (includes inlined) names it and no other; no source defines it with a
    value of its own."""
    import re

    from cupyconv._core.kernel_module import KERNEL_CONSTANTS, KERNEL_DIR

    sources = {p.name: p.read_text() for p in KERNEL_DIR.rglob("*") if p.suffix in (".cu", ".cuh")}
    inlined = {m.source: load_source(m.source) for m in REGISTRY}
    heads = {m: m.code[:len(m.code) - len(inlined[m.source])] for m in REGISTRY}  # the defines
    for name, value in KERNEL_CONSTANTS.items():
        assert any(re.search(rf"\b{name}\b", text) for text in sources.values()), name
        for file, text in sources.items():
            assert not re.search(rf"^\s*#\s*define\s+{name}\b", text, re.M), (file, name)
        naming = {src for src, text in inlined.items() if re.search(rf"\b{name}\b", text)}
        for module, head in heads.items():
            assert (f"#define {name} {value}\n" in head) == (module.source in naming), \
                (module.source, name)


def test_a_constant_reaches_only_the_modules_that_name_it():
    """The define of the repair scan's unroll is in the direct kernels' text only, so changing
    it leaves every other module's text (and compile caches) as it was."""
    from cupyconv._core.kernels import STRIDED_COPY

    assert "NAN_SCAN_UNROLL" in DIRECT_CONV.code
    assert "NAN_SCAN_UNROLL" not in STRIDED_COPY.code
    with_unroll = sum("#define NAN_SCAN_UNROLL" in m.code for m in REGISTRY)
    assert with_unroll == sum(m.source == DIRECT_CONV.source for m in REGISTRY)


class _FakeKernel:
    def __init__(self, name, launches):
        self.name, self.launches, self.max_dynamic_shared_size_bytes = name, launches, 48 * 1024

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((self.name, grid, block, args, shared_mem))


class _SlowRawModule:
    """A RawModule stand-in whose compile takes 0.2 s (outside the GIL, as NVRTC's) and whose
    kernels record their launches."""
    lock = threading.Lock()
    compiles: list = []
    launches: list = []

    def __init__(self, code, options, name_expressions):
        self.names = name_expressions
        self.kernels = {}

    def compile(self):
        time.sleep(0.2)
        with _SlowRawModule.lock:
            _SlowRawModule.compiles.append(self.names)

    def get_function(self, name):
        assert name in self.names
        return self.kernels.setdefault(name, _FakeKernel(name, _SlowRawModule.launches))


@pytest.fixture
def slow_compiler(monkeypatch):
    import contextlib

    import cupy

    monkeypatch.setattr(cupy, "RawModule", _SlowRawModule)
    monkeypatch.setattr(jit, "_target", lambda: ("nvrtc", "sm_90", 0))
    monkeypatch.setattr(jit, "bind_thread_context", lambda: None)  # no device
    monkeypatch.setattr(jit, "_device_id", lambda: 0)
    monkeypatch.setattr(jit, "_on_device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr("cupyconv._core.program.bind_thread_context", lambda: None)
    _SlowRawModule.compiles, _SlowRawModule.launches = [], []
    jit.clear_cache()
    yield _SlowRawModule
    jit.clear_cache()


def test_discovery_notes_modules_and_neither_compiles_nor_launches(slow_compiler):
    """Within jit.discovering a kernel is a stand-in: its module is noted, launches do nothing and
    an opted-in shared-memory size waits; after the block its first launch compiles the module,
    applies the size and launches (so a stand-in kept by a plan cache still works)."""
    from cupyconv._core.kernels import IM2COL

    with jit.discovering() as found:
        k = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
        jit.get_function(IM2COL, "im2col", "float16")
        jit.get_function(DIRECT_CONV, "direct_conv", "float64")
        k((1,), (32,), ("x",))
        if k.max_dynamic_shared_size_bytes < 100_000:
            k.max_dynamic_shared_size_bytes = 100_000
        assert jit.discovery_active()
    assert not jit.discovery_active()
    # (modules are compiled per dtype: KernelModule.for_dtype)
    f32 = DIRECT_CONV.for_dtype("float32")
    assert list(found) == [f32, IM2COL.for_dtype("float16"), DIRECT_CONV.for_dtype("float64")]
    assert slow_compiler.compiles == [] and slow_compiler.launches == []
    assert jit.cache_info()["misses"] == 0
    with jit.discovering() as again:  # a stand-in kept (by a plan cache) is noted when launched
        k((1,), (32,), ("x",))
    assert list(again) == [f32] and slow_compiler.compiles == []
    k((2,), (64,), ("y",))
    assert slow_compiler.compiles == [list(f32.name_expressions)]
    assert slow_compiler.launches == [("direct_conv<float>", (2,), (64,), ("y",), 0)]
    assert k.raw.max_dynamic_shared_size_bytes == 100_000  # the real kernel took its place
    k((3,), (64,), ())
    assert len(slow_compiler.compiles) == 1 and len(slow_compiler.launches) == 2
    with jit.discovering():
        stand_in = jit.get_function(IM2COL, "im2col", "float16")
    stand_in.max_dynamic_shared_size_bytes = 70_000  # outside a discovery: compiles, applies
    assert isinstance(stand_in.raw, _FakeKernel)
    assert stand_in.raw.max_dynamic_shared_size_bytes == 70_000
    assert len(slow_compiler.compiles) == 2


def test_compile_modules_compiles_each_module_once_on_several_threads(slow_compiler):
    from cupyconv._core.kernels import COL2IM, IM2COL, SPLITK_REDUCE

    mods = [m.for_dtype("float32") for m in (DIRECT_CONV, IM2COL, COL2IM, SPLITK_REDUCE, IM2COL)]
    start = time.perf_counter()
    assert jit.compile_modules(mods, workers=4) == 4
    elapsed = time.perf_counter() - start
    assert len(slow_compiler.compiles) == 4 and elapsed < 0.6  # 4 x 0.2 s compiles at once
    assert jit.compile_modules(mods, workers=4) == 4  # all in memory now: nothing compiles
    assert len(slow_compiler.compiles) == 4
    info = jit.cache_info()
    assert info["misses"] == 4 and info["hits"] == 4
    assert jit.precompile(mods[1::-1], workers=1) == 2
    # a module of four dtypes is four to compile, one of them in memory already
    assert jit.compile_modules([SPLITK_REDUCE], workers=4) == 4
    assert len(slow_compiler.compiles) == 7


def test_the_jit_compiles_a_module_per_dtype():
    """A module of several dtypes is compiled per dtype (one call compiles only its own dtype's
    instantiations), with the same code and the name expressions of that dtype."""
    from cupyconv._core.kernels import SPLITK_REDUCE, STRIDED_COPY

    units = STRIDED_COPY.units()
    assert [u.dtypes for u in units] == [(d,) for d in STRIDED_COPY.dtypes]
    assert all(u.code == STRIDED_COPY.code for u in units)
    names = [u.name_expressions for u in units]
    assert sorted(sum(names, ())) == sorted(STRIDED_COPY.name_expressions)
    assert len(set(sum(names, ()))) == sum(len(n) for n in names)  # (disjoint)
    one = SPLITK_REDUCE.for_dtype("bfloat16")
    assert one.for_dtype("bfloat16") is one and one.units() == (one,)
    with pytest.raises(ValueError, match="no complex64 instantiations"):
        SPLITK_REDUCE.for_dtype("complex64")
