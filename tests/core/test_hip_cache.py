"""cupyconv's on-disk HIP module cache on the CPU: key, store, load, atomic writes, damaged
entries, and the JIT layer's HIP path driven by a fake HIPRTC and a fake cupy.RawModule."""

import json
import os

import pytest

from cupyconv._core import hip_cache, jit
from cupyconv._core.kernels import DIRECT_CONV

NAMES = ("k<float>", "k<double>")
LOWERED = {"k<float>": "_Z1kIfEvPT_", "k<double>": "_Z1kIdEvPT_"}
KEY_ARGS = dict(code="template <typename T> __global__ void k(T*) {}", options=("-std=c++17",),
                arch="gfx90a:sramecc+:xnack-", compiler="hiprtc 6.2", name_expressions=NAMES)


class FakeCompiler:
    """Counts compiles; returns a code object that depends on ``tag``."""

    def __init__(self, tag=b"A", lowered=LOWERED):
        self.calls, self.tag, self.lowered = 0, tag, lowered

    def __call__(self):
        self.calls += 1
        return b"\x7fELF-code-object-" + self.tag, dict(self.lowered)


def _key(**changes):
    return hip_cache.cache_key(**{**KEY_ARGS, **changes})


def test_key_holds_everything_that_changes_the_binary_or_its_names():
    base = _key()
    assert base == _key() and len(base) == 64
    assert _key(name_expressions=NAMES[::-1]) == base  # a set: order changes nothing stored
    for change in (dict(code=KEY_ARGS["code"] + " "), dict(options=("-std=c++14",)),
                   dict(options=("-std=c++17", "-DCC_WAVE_SIZE=64")), dict(arch="gfx90a"),
                   dict(arch="gfx942"), dict(compiler="hiprtc 7.0"),
                   dict(name_expressions=NAMES[:1]), dict(name_expressions=NAMES + ("k<int>",))):
        assert _key(**change) != base, change


def test_miss_compiles_and_stores_then_a_new_process_loads_without_compiling(tmp_path):
    key, fake = _key(), FakeCompiler()
    module, hit = hip_cache.compile_cached(tmp_path, key, NAMES, fake)
    assert (hit, fake.calls) == (False, 1)
    assert module.lowered == LOWERED
    assert module.path.read_bytes() == b"\x7fELF-code-object-A"
    assert module.path.parent == tmp_path and module.path.suffix == ".hsaco"
    # what a later process does: nothing in memory, the same key
    again, hit = hip_cache.compile_cached(tmp_path, key, NAMES, fake)
    assert (hit, fake.calls) == (True, 1)
    assert again == module
    # a subset of the stored names is served too (only the requested ones are returned)
    assert hip_cache.load(tmp_path, key, NAMES[:1]).lowered == {"k<float>": LOWERED["k<float>"]}
    # nothing but the record and the code object; no temporary file left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{key}.json", module.path.name])


def _record(root, key):
    return root / f"{key}.json"


@pytest.mark.parametrize("damage", [
    "garbage record", "empty record", "other format", "record not an object", "lowered not a dict",
    "name missing", "empty lowered name", "binary path escapes", "binary missing",
    "binary truncated", "binary altered"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(tmp_path, damage):
    key = _key()
    module, _ = hip_cache.compile_cached(tmp_path, key, NAMES, FakeCompiler())
    record_path = _record(tmp_path, key)
    record = json.loads(record_path.read_text())
    if damage == "garbage record":
        record_path.write_bytes(b"\x00\xffnot json")
    elif damage == "empty record":
        record_path.write_text("")
    elif damage == "other format":
        record_path.write_text(json.dumps({**record, "format": hip_cache.FORMAT + 1}))
    elif damage == "record not an object":
        record_path.write_text("[1, 2]")
    elif damage == "lowered not a dict":
        record_path.write_text(json.dumps({**record, "lowered": ["_Z1kIfEvPT_"]}))
    elif damage == "name missing":
        record_path.write_text(json.dumps({**record, "lowered": {"k<float>": "_Z1kIfEvPT_"}}))
    elif damage == "empty lowered name":
        record_path.write_text(json.dumps({**record, "lowered": {**LOWERED, "k<double>": ""}}))
    elif damage == "binary path escapes":
        record_path.write_text(json.dumps({**record, "binary": "../" + record["binary"]}))
    elif damage == "binary missing":
        module.path.unlink()
    elif damage == "binary truncated":
        module.path.write_bytes(module.path.read_bytes()[:5])
    else:
        module.path.write_bytes(module.path.read_bytes()[:-1] + b"B")
    assert hip_cache.load(tmp_path, key, NAMES) is None
    fake = FakeCompiler()
    rebuilt, hit = hip_cache.compile_cached(tmp_path, key, NAMES, fake)
    assert (hit, fake.calls) == (False, 1)
    assert rebuilt.lowered == LOWERED and rebuilt.path.read_bytes() == b"\x7fELF-code-object-A"
    assert hip_cache.compile_cached(tmp_path, key, NAMES, fake) == (rebuilt, True)


def test_a_new_code_object_gets_a_file_of_its_own(tmp_path):
    """The code object is named by its digest: a process that stores other bytes under the same
    key (a rewrite after damage) never changes a file another process may be loading."""
    key = _key()
    first = hip_cache.store(tmp_path, key, b"one", LOWERED)
    second = hip_cache.store(tmp_path, key, b"two", LOWERED)
    assert first.path != second.path and first.path.read_bytes() == b"one"
    assert hip_cache.load(tmp_path, key, NAMES) == second  # the record names the last one


def test_discard_forgets_the_entry(tmp_path):
    key = _key()
    module, _ = hip_cache.compile_cached(tmp_path, key, NAMES, FakeCompiler())
    hip_cache.discard(tmp_path, key)
    assert list(tmp_path.iterdir()) == []
    hip_cache.discard(tmp_path, key)  # nothing there: no error


def test_a_compiler_without_lowered_names_is_an_error_and_stores_nothing(tmp_path):
    fake = FakeCompiler(lowered={"k<float>": "_Z1kIfEvPT_"})
    with pytest.raises(ValueError, match=r"k<double>"):
        hip_cache.compile_cached(tmp_path, _key(), NAMES, fake)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_compile_stores_nothing(tmp_path):
    def broken():
        raise RuntimeError("hiprtc: error: expected ';'")

    with pytest.raises(RuntimeError, match="expected"):
        hip_cache.compile_cached(tmp_path, _key(), NAMES, broken)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_write_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "f.bin"
    hip_cache._atomic_write(target, b"old")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(hip_cache.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        hip_cache._atomic_write(target, b"new contents")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_an_unwritable_directory_is_an_oserror(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the cache directory should be
    with pytest.raises(OSError):
        hip_cache.compile_cached(blocker / "hip-kernels", _key(), NAMES, FakeCompiler())


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(hip_cache.CACHE_ENV, raising=False)
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "cc"))
    assert hip_cache.cache_root() == tmp_path / "cc" / "hip-kernels"
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
    assert hip_cache.cache_root() is None
    monkeypatch.setenv(hip_cache.CACHE_ENV, str(tmp_path / "mine"))  # explicit wins
    assert hip_cache.cache_root() == tmp_path / "mine"
    for off in ("off", "0", "None"):
        monkeypatch.setenv(hip_cache.CACHE_ENV, off)
        assert hip_cache.cache_root() is None


@pytest.mark.parametrize("env", [{}, {"XDG_CACHE_HOME": "xdg"}, {"CUPYCONV_CACHE_DIR": "mine"},
                                 {"CUPYCONV_CACHE_DIR": "mine", "XDG_CACHE_HOME": "xdg"}])
def test_the_user_cache_directory_is_the_autotuners(tmp_path, monkeypatch, env):
    from cupyconv._dispatch.tune_cache import cache_dir

    for name in ("CUPYCONV_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path / value))
    assert hip_cache.user_cache_dir() == cache_dir()


# ------------------------------------------------------------------ the JIT layer's HIP path
class FakeRawModule:
    """cupy.RawModule(path=...) or (code=..., name_expressions=...), recording what it got."""

    made = []

    def __init__(self, *, code=None, path=None, options=(), name_expressions=None):
        self.code, self.path, self.names = code, path, name_expressions
        FakeRawModule.made.append(self)

    def compile(self):
        pass

    def get_function(self, name):
        if self.path is not None:
            assert os.path.exists(self.path)
            return ("from disk", name)
        assert name in self.names
        return ("compiled by cupy", name)


@pytest.fixture
def fake_hip(monkeypatch, tmp_path):
    """The JIT layer on a pretend gfx90a: HIPRTC replaced by a counter."""
    import cupy

    compiles = []

    def fake_hiprtc(code, options, name_expressions):
        compiles.append(options)
        return b"\x7fELF" + code.encode()[:64], {ne: "_mangled_" + ne for ne in name_expressions}

    monkeypatch.setattr(cupy, "RawModule", FakeRawModule)
    monkeypatch.setattr(jit, "_target", lambda: ("hiprtc", "gfx90a:sramecc+:xnack-", 0))
    monkeypatch.setattr(jit, "bind_thread_context", lambda: None)  # no device
    monkeypatch.setattr(jit, "_hip_options", lambda options: options + ("-I/opt/rocm/include",))
    monkeypatch.setattr(jit, "_hiprtc_version", lambda: "hiprtc 6.2")
    monkeypatch.setattr(jit, "_hiprtc_compile", fake_hiprtc)
    monkeypatch.setenv(hip_cache.CACHE_ENV, str(tmp_path / "hip"))
    FakeRawModule.made = []
    jit.clear_cache()
    yield compiles
    jit.clear_cache()


def test_hip_modules_load_from_our_cache_in_a_new_process(fake_hip):
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    assert kernel.raw == ("from disk", "_mangled_direct_conv<float>")
    assert len(fake_hip) == 1 and "-DCC_WAVE_SIZE=64" in fake_hip[0]
    jit.clear_cache()  # a new process: nothing in memory
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    assert kernel.raw == ("from disk", "_mangled_direct_conv<float>")
    assert len(fake_hip) == 1  # not compiled again
    # (another dtype is another module: KernelModule.for_dtype)
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float64")
    assert kernel.raw == ("from disk", "_mangled_direct_conv<double>") and len(fake_hip) == 2
    assert all(m.path is not None and m.code is None for m in FakeRawModule.made)


def test_hip_without_our_cache_uses_cupys_path(fake_hip, monkeypatch):
    monkeypatch.setenv(hip_cache.CACHE_ENV, "off")
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    assert kernel.raw == ("compiled by cupy", "direct_conv<float>")
    assert fake_hip == []


def test_an_unwritable_hip_cache_falls_back_to_cupys_path(fake_hip, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(hip_cache.CACHE_ENV, str(blocker / "hip"))
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    assert kernel.raw == ("compiled by cupy", "direct_conv<float>")


def test_a_stored_code_object_that_does_not_load_is_compiled_again(fake_hip, monkeypatch):
    jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    jit.clear_cache()
    loads = []

    def flaky_get_function(self, name):
        loads.append(self.path)
        if len(loads) == 1:
            raise RuntimeError("hipErrorInvalidImage")  # e.g. a code object from a broken disk
        return ("from disk", name)

    monkeypatch.setattr(FakeRawModule, "get_function", flaky_get_function)
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    assert kernel.raw == ("from disk", "_mangled_direct_conv<float>")
    assert len(fake_hip) == 2  # compiled again after the failed load


def test_nvidia_keeps_cupys_path(fake_hip, monkeypatch):
    monkeypatch.setattr(jit, "_target", lambda: ("nvrtc", "sm_90", 0))
    monkeypatch.setattr(jit, "bind_thread_context", lambda: None)  # no device
    kernel = jit.get_function(DIRECT_CONV, "direct_conv", "float32")
    assert kernel.raw == ("compiled by cupy", "direct_conv<float>")
    assert fake_hip == []
