"""The autotuner's persistent cache (``_dispatch/tune_cache.py``) and winner selection
(``_dispatch/tune.py``), on the CPU (fake timers, fake runners)."""

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import cupyconv
from cupyconv._gemm import implicit_cost as _gemm_implicit_cost
from cupyconv._gemm import launch as _gemm_launch
from cupyconv._gemm import plans as _gemm_plans
from cupyconv._dispatch import forward as _plan
from cupyconv._dispatch import choose as _choose
from cupyconv._dispatch import tune as _tune
from cupyconv._dispatch import tune_cache as _tune_cache
from cupyconv._core.geometry import ConvGeometry
from cupyconv._dispatch.tune import Candidate, autotune, forward_candidates, problem_key
from cupyconv._dispatch.tune_cache import TuneCache

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ("NVIDIA Fake 9000", "90")
CANDS = [Candidate("direct"), Candidate("implicit_gemm", (128, 128, 8, 8, 8), 1),
         Candidate("implicit_gemm", (64, 64, 16, 4, 4), 4)]


def geom(**kw):
    opts = dict(padding=1, dtype="float32")
    opts.update(kw)
    return ConvGeometry.from_shapes((8, 64, 28, 28), (64, 64, 3, 3), **opts)


@pytest.fixture
def fake_sm_count(monkeypatch):
    """132 multiprocessors without a GPU; the plan caches filled under it are dropped after."""
    monkeypatch.setattr(_gemm_plans, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(_gemm_implicit_cost, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(_plan, "sm_count", lambda device_id: 132)
    yield
    for cached in (_gemm_plans.plan_gemm, _plan.heuristic_choice, _choose.tuned_choice):
        cached.cache_clear()


def fake_measure(times):
    calls = []

    def measure(cand):
        calls.append(cand)
        return times[cand.label]

    return measure, calls


def test_cache_dir_override_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "c"))
    assert _tune_cache.cache_path() == tmp_path / "c" / "tune.json"
    monkeypatch.delenv("CUPYCONV_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if os.name != "nt":
        assert _tune_cache.cache_path() == tmp_path / "xdg" / "cupyconv" / "tune.json"


def test_key_names_device_capability_dtype_layout_and_geometry():
    k = problem_key(DEVICE, "fwd", geom())
    assert k.startswith("NVIDIA Fake 9000|sm_90|fwd|float32|NCHW|")
    assert k != problem_key(DEVICE, "fwd", geom(dtype="float16"))
    assert k != problem_key(DEVICE, "fwd", geom(stride=2))
    assert k != problem_key(("NVIDIA Fake 9000", "80"), "fwd", geom())
    nhwc = ConvGeometry.from_shapes((8, 28, 28, 64), (64, 3, 3, 64), padding=1, layout="NHWC",
                                    dtype="float32")
    assert "|NHWC|" in problem_key(DEVICE, "fwd", nhwc)


def test_round_trip_picks_the_fastest_and_reuses_it(tmp_path):
    cache = TuneCache(tmp_path / "tune.json")
    times = {c.label: t for c, t in zip(CANDS, (3.0, 1.0, 2.0))}
    measure, calls = fake_measure(times)
    first = autotune("k1", CANDS, measure, cache)
    assert first.best == CANDS[1] and first.ms == 1.0 and not first.cached
    assert len(calls) == 3
    data = json.loads((tmp_path / "tune.json").read_text())
    assert data["schema"] == _tune_cache.SCHEMA and data["version"] == cupyconv.__version__
    assert data["entries"]["k1"]["best"] == {"algorithm": "implicit_gemm",
                                             "tile": [128, 128, 8, 8, 8], "splits": 1}
    # a new process (a new TuneCache on the same file) gets the winner without measuring
    again = autotune("k1", CANDS, measure, TuneCache(tmp_path / "tune.json"))
    assert again.cached and again.best == CANDS[1] and len(calls) == 3
    assert again.best.plan().tile == (128, 128, 8, 8, 8) and again.best.plan().splits == 1
    # retune measures again and overwrites
    times[CANDS[0].label] = 0.5
    third = autotune("k1", CANDS, measure, cache, retune=True)
    assert third.best == CANDS[0] and len(calls) == 6
    assert cache.get("k1")["best"]["algorithm"] == "direct"


def test_failing_candidates_are_skipped_and_none_left_means_none(tmp_path):
    cache = TuneCache(tmp_path / "tune.json")

    def measure(cand):
        if cand.algorithm == "direct":
            raise RuntimeError("compile failed")
        return 1.0 if cand.splits == 4 else 2.0

    with pytest.warns(RuntimeWarning, match="compile failed"):
        result = autotune("k", CANDS, measure, cache)
    assert result.best == CANDS[2] and result.timings["direct"] is None

    def broken(cand):
        raise RuntimeError("no")

    with pytest.warns(RuntimeWarning):
        assert autotune("other", CANDS, broken, cache) is None
    assert cache.get("other") is None


def test_an_entry_naming_an_unknown_candidate_is_retuned(tmp_path):
    cache = TuneCache(tmp_path / "tune.json")
    cache.put("k", {"best": {"algorithm": "winograd", "tile": None, "splits": None}, "ms": 0.1})
    measure, calls = fake_measure({c.label: 1.0 for c in CANDS})
    result = autotune("k", CANDS, measure, cache)
    assert not result.cached and len(calls) == 3 and result.best == CANDS[0]


@pytest.mark.parametrize("content", ["{not json", "[]", '{"entries": 3}', "", "\x00\x01"])
def test_a_corrupt_file_warns_and_is_rebuilt(tmp_path, content):
    path = tmp_path / "tune.json"
    path.write_text(content)
    cache = TuneCache(path)
    with pytest.warns(RuntimeWarning, match="corrupt"):
        assert cache.get("k") is None
    measure, _ = fake_measure({c.label: 1.0 for c in CANDS})
    with pytest.warns(RuntimeWarning, match="corrupt"):
        autotune("k", CANDS, measure, cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get("k")["best"]["algorithm"] == "direct"


def test_a_file_from_another_version_is_stale_and_rebuilt(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"schema": _tune_cache.SCHEMA, "version": "0.0.1", "entries": {
        "k": {"best": {"algorithm": "direct"}, "ms": 1.0}}}))
    with pytest.warns(RuntimeWarning, match="0.0.1"):
        assert TuneCache(path).get("k") is None
    path.write_text(json.dumps({"schema": 999, "version": cupyconv.__version__, "entries": {}}))
    with pytest.warns(RuntimeWarning, match="schema 999"):
        TuneCache(path).put("k2", {"best": CANDS[0].to_json(), "ms": 1.0})
    data = json.loads(path.read_text())
    assert data["schema"] == _tune_cache.SCHEMA and list(data["entries"]) == ["k2"]


def test_an_unwritable_cache_warns_but_tuning_still_answers(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = TuneCache(blocker / "sub" / "tune.json")  # a directory under a plain file
    measure, _ = fake_measure({c.label: t for c, t in zip(CANDS, (1.0, 2.0, 3.0))})
    with pytest.warns(RuntimeWarning, match="cannot write"):
        result = autotune("k", CANDS, measure, cache)
    assert result.best == CANDS[0]


_WRITER = """
import sys
from cupyconv._dispatch.tune_cache import TuneCache
cache = TuneCache(sys.argv[1])
for i in range(int(sys.argv[3])):
    cache.put(f"{sys.argv[2]}-{i}", {"best": {"algorithm": "direct"}, "ms": float(i)})
"""


def test_concurrent_writers_keep_the_file_whole_and_every_entry(tmp_path):
    path = tmp_path / "tune.json"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"w{p}", "15"],
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              stderr=subprocess.PIPE, text=True) for p in range(6)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    data = json.loads(path.read_text())
    keys = set(data["entries"])
    if os.name == "nt":  # no flock: whole file guaranteed, every entry not
        assert keys
    else:
        assert keys == {f"w{p}-{i}" for p in range(6) for i in range(15)}
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]


def test_forward_candidates_cover_algorithms_tiles_and_splits():
    from cupyconv._core.kernels import GEMM_TILES

    cands = forward_candidates(geom())
    algos = {c.algorithm for c in cands}
    assert algos == {"implicit_gemm", "im2col_gemm", "direct"}  # depthwise does not apply
    tiles = {c.tile for c in cands if c.algorithm == "implicit_gemm"}
    assert tiles == set(GEMM_TILES["float32"])
    assert {c.splits for c in cands if c.tile} >= {1, 2, 4, 8}
    # k = 64 * 9 = 576: a 16-deep tile has 36 slices, so at most 8 parts of >= 4 slices
    assert all(36 >= 4 * c.splits or c.splits == 1 for c in cands if c.tile and c.tile[2] == 16)
    dw = ConvGeometry.from_shapes((2, 16, 20, 20), (16, 1, 3, 3), groups=16, dtype="float64")
    assert "depthwise" in {c.algorithm for c in forward_candidates(dw)}
    assert {c.tile for c in forward_candidates(dw) if c.tile} == set(GEMM_TILES["float64"])


def test_with_plan_forces_the_gemm_plan_only_inside_the_run():
    seen = []
    algo = _plan.Algorithm("fake", lambda g: True, lambda g, d: 0.0,
                           lambda *a: seen.append(_gemm_launch._FORCED.get()), tiled=True)
    plan = Candidate("fake", (64, 64, 16, 4, 4), 2).plan()
    algo.with_plan(plan).run(None, None, None, None, None)
    algo.run(None, None, None, None, None)
    assert seen == [plan, None]
    assert algo.with_plan(None) is algo


def test_autotune_switch_and_fallback_to_the_heuristic(monkeypatch, fake_sm_count):
    for value, on in (("1", True), ("true", True), ("0", False), ("", False)):
        monkeypatch.setenv("CUPYCONV_AUTOTUNE", value)
        assert _choose.autotune_enabled() is on
    g = geom()

    def broken(*a, **k):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(_tune, "tune_geometry", broken)
    with pytest.warns(RuntimeWarning, match="heuristic"):
        algo = _tune.tuned_algorithm(g, 0)
    assert algo is _plan.heuristic_choice(g, "auto", 0)

    winner = _tune.TuneResult("k", Candidate("im2col_gemm", (64, 64, 16, 4, 4), 2), 1.0, {}, True)
    monkeypatch.setattr(_tune, "tune_geometry", lambda *a, **k: winner)
    _choose.tuned_choice.cache_clear()
    algo = _choose.tuned_choice(g, 0)
    assert algo.name == "im2col_gemm" and algo.plan.tile == (64, 64, 16, 4, 4)
    kernel, shape, plan = _plan.planned_gemm(g, algo, 0)
    assert kernel == "gemm" and plan.splits == 2


def test_planned_gemm_reports_the_heuristic_plan(fake_sm_count):
    g = geom()
    algo = _plan.heuristic_choice(g, "auto", 0)
    kernel, shape, plan = _plan.planned_gemm(g, _plan.FORWARD["implicit_gemm"], 0)
    assert kernel == "conv_fprop" and shape == tuple(g.gemm_forward)
    assert plan == _gemm_plans.plan_gemm("float32", *shape, 0)
    assert _plan.planned_gemm(g, _plan.FORWARD["direct"], 0) is None
    pw = ConvGeometry.from_shapes((8, 64, 56, 56), (32, 64, 1, 1), dtype="float32")
    assert _plan.planned_gemm(pw, _plan.FORWARD["implicit_gemm"], 0)[:2] == (
        "gemm", (56 * 56, 32, 64, 8))
    assert algo.name in _plan.FORWARD


# ----------------------------------------------------- robustness: never raise, rebuild
def _file(entries) -> str:
    return json.dumps({"schema": _tune_cache.SCHEMA, "version": cupyconv.__version__,
                       "entries": entries})


GOOD = {"best": {"algorithm": "direct", "tile": None, "splits": None}, "ms": 1.0,
        "timings": {"direct": 1.0, "implicit_gemm": None}, "date": "2025-01-01 00:00:00"}
_DEEP = 10**5

CORRUPT_FILES = {
    "invalid_utf8": b'\xff\xfe{"schema": 1}',
    "invalid_utf8_in_string": _file({"k": GOOD}).encode().replace(b"direct", b"dir\xc3\x28ct", 1),
    "deep_array": b"[" * _DEEP + b"]" * _DEEP,
    "deep_object": b'{"a":' * _DEEP + b"1" + b"}" * _DEEP,
    "deep_in_entries": _file({}).encode()[:-2] + b'{"k":' + b"[" * _DEEP + b"]" * _DEEP + b"}}",
    "top_number": b"3",
    "top_string": b'"tune"',
    "top_null": b"null",
    "top_true": b"true",
    "top_nan": b"NaN",
    "huge_integer": b"1" * 5000,
    "entries_list": json.dumps({"schema": _tune_cache.SCHEMA, "version": cupyconv.__version__,
                                "entries": [GOOD]}).encode(),
    "entries_missing": json.dumps({"schema": _tune_cache.SCHEMA,
                                   "version": cupyconv.__version__}).encode(),
}


@pytest.mark.parametrize("name", sorted(CORRUPT_FILES))
def test_any_corrupt_file_warns_naming_it_and_is_rebuilt(tmp_path, name):
    path = tmp_path / "tune.json"
    path.write_bytes(CORRUPT_FILES[name])
    cache = TuneCache(path)
    with pytest.warns(RuntimeWarning, match="tuning cache .*tune.json.*corrupt"):
        assert cache.get("k") is None
    with pytest.warns(RuntimeWarning, match="corrupt"):
        assert cache.entries() == {}
    measure, calls = fake_measure({c.label: t for c, t in zip(CANDS, (2.0, 1.0, 3.0))})
    with pytest.warns(RuntimeWarning, match="corrupt"):
        result = autotune("k", CANDS, measure, cache)
    assert result.best == CANDS[1] and not result.cached and len(calls) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file is valid: no more warnings
        assert cache.get("k")["best"]["tile"] == [128, 128, 8, 8, 8]
        again = autotune("k", CANDS, measure, TuneCache(path))
    assert again.cached and again.best == CANDS[1] and len(calls) == 3
    assert _tune_cache.parse_cache(path.read_bytes())[1] is None


def test_a_file_larger_than_the_limit_is_corrupt(tmp_path, monkeypatch):
    monkeypatch.setattr(_tune_cache, "MAX_FILE_BYTES", 64)
    path = tmp_path / "tune.json"
    path.write_text(_file({"k": GOOD}))
    with pytest.warns(RuntimeWarning, match="larger than"):
        assert TuneCache(path).get("k") is None


def _bad(**change):
    entry = json.loads(json.dumps(GOOD))
    for field, value in change.items():
        if field.startswith("best_"):
            entry["best"][field[5:]] = value
        else:
            entry[field] = value
    return entry


BAD_ENTRIES = {
    "not_object_int": 3,
    "not_object_list": [GOOD],
    "not_object_string": "direct",
    "not_object_null": None,
    "best_string": _bad(best="direct"),
    "best_list": _bad(best=["direct", None, None]),
    "best_null": _bad(best=None),
    "best_missing": {"ms": 1.0},
    "algorithm_int": _bad(best_algorithm=3),
    "algorithm_missing": {"best": {"tile": None}, "ms": 1.0},
    "algorithm_empty": _bad(best_algorithm=""),
    "tile_string": _bad(best_tile="128x128"),
    "tile_of_strings": _bad(best_tile=["128", "128", "8"]),
    "tile_of_floats": _bad(best_tile=[128.0, 128, 8]),
    "tile_of_bools": _bad(best_tile=[True, True]),
    "tile_zero": _bad(best_tile=[0, 128, 8]),
    "tile_huge": _bad(best_tile=[2**70, 128, 8]),
    "tile_empty": _bad(best_tile=[]),
    "tile_nested": _bad(best_tile=[[128], 128, 8]),
    "splits_string": _bad(best_splits="2"),
    "splits_bool": _bad(best_splits=True),
    "splits_negative": _bad(best_splits=-1),
    "splits_huge": _bad(best_splits=10**30),
    "best_unknown_field": _bad(best_extra=1),
    "ms_missing": {"best": GOOD["best"]},
    "ms_string": _bad(ms="1.0"),
    "ms_nan": _bad(ms=math.nan),
    "ms_inf": _bad(ms=math.inf),
    "ms_negative": _bad(ms=-1.0),
    "ms_bool": _bad(ms=True),
    "ms_list": _bad(ms=[1.0]),
    "timings_list": _bad(timings=[1.0]),
    "timings_nan": _bad(timings={"direct": math.nan}),
    "timings_string": _bad(timings={"direct": "fast"}),
    "date_int": _bad(date=20250101),
    "unknown_field": _bad(extra={"a": 1}),
}


@pytest.mark.parametrize("name", sorted(BAD_ENTRIES))
def test_an_invalid_entry_is_dropped_with_a_warning_and_the_rest_kept(tmp_path, name):
    path = tmp_path / "tune.json"
    # json.dumps writes NaN/Infinity as Python's json reads them (1e999 is also read as inf)
    path.write_text(_file({"bad": BAD_ENTRIES[name], "good": GOOD}))
    cache = TuneCache(path)
    with pytest.warns(RuntimeWarning, match="tuning cache .*tune.json.* corrupt entries"):
        assert cache.get("bad") is None
    with pytest.warns(RuntimeWarning, match="'bad'"):
        assert cache.get("good") == GOOD
    measure, calls = fake_measure({c.label: 1.0 for c in CANDS})
    with pytest.warns(RuntimeWarning, match="corrupt entries"):
        result = autotune("bad", CANDS, measure, cache)  # tuned again, never raises
    assert not result.cached and len(calls) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(cache.entries()) == {"bad", "good"}
        assert cache.get("good") == GOOD and cache.get("bad")["best"]["algorithm"] == "direct"
        assert autotune("bad", CANDS, measure, cache).cached


def test_json_spellings_of_huge_and_non_finite_numbers_are_not_times(tmp_path):
    path = tmp_path / "tune.json"
    text = _file({"a": GOOD, "b": GOOD, "c": GOOD}).replace('"ms": 1.0', '"ms": 1e999', 1)
    text = text.replace('"ms": 1.0', '"ms": -Infinity', 1)
    path.write_text(text)
    with pytest.warns(RuntimeWarning, match="and 1 more"):
        assert set(TuneCache(path).entries()) == {"c"}


def test_a_measure_returning_nan_or_negative_is_a_failed_candidate(tmp_path):
    cache = TuneCache(tmp_path / "tune.json")
    times = {CANDS[0].label: math.nan, CANDS[1].label: -1.0, CANDS[2].label: 2.0}
    measure, _ = fake_measure(times)
    with pytest.warns(RuntimeWarning, match="measured"):
        result = autotune("k", CANDS, measure, cache)
    assert result.best == CANDS[2]
    assert result.timings[CANDS[0].label] is None and result.timings[CANDS[1].label] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get("k")["ms"] == 2.0


def test_put_of_an_entry_json_cannot_hold_warns_and_keeps_the_file(tmp_path):
    path = tmp_path / "tune.json"
    cache = TuneCache(path)
    assert cache.put("good", GOOD)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        assert not cache.put("bad", _bad(ms=math.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(cache.entries()) == {"good"}


def test_the_cache_is_read_as_utf8_whatever_the_locale(tmp_path):
    path = tmp_path / "tune.json"
    cache = TuneCache(path)
    key = "Ünïcode GPU ✓|sm_90|fwd"
    assert cache.put(key, GOOD)
    assert cache.get(key) == GOOD
    path.write_bytes(_file({key: GOOD}).encode("utf-8"))  # unescaped UTF-8 also reads
    assert TuneCache(path).get(key) == GOOD
