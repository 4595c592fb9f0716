"""benchmarks/bench_cold.py without a GPU: the layers become precompile problems of the same calls."""

import importlib.util
import sys
from pathlib import Path

import pytest

import cupyconv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_cold():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_cold", ROOT / "benchmarks" / "bench_cold.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_layers_become_problems_of_their_shapes(bench_cold, layout):
    layers = bench_cold.NETWORKS["mobilenetv2"]()
    problems = bench_cold.problems(layers, 2, "float16", layout, bench_cold.PASSES["training"])
    assert len(problems) == len(layers)
    for layer, p in zip(layers, problems):
        geometry = {k: p[k] for k in ("stride", "padding", "groups", "layout")}
        assert cupyconv.output_shape(p["x"], p["w"], **geometry) == layer.output_shape(2, layout)
        assert p["dtype"] == "float16"
        assert p["passes"] == ("forward", "backward_data", "backward_weight")


def test_the_modes_and_arguments(bench_cold):
    assert bench_cold.MODES == ("first_call", "precompile", "disk", "disk_precompile", "torch")
    assert bench_cold.PASSES["forward"] == ("forward",)
    with pytest.raises(SystemExit):
        bench_cold.main(["--network", "no-such-net"])


def test_a_layer_slice_selects_those_layers(bench_cold):
    class Args:
        network, layers = "resnet50", "1:3"
    every = bench_cold.NETWORKS["resnet50"]()
    assert bench_cold.selected_layers(Args) == every[1:3]
    Args.layers = ":"
    assert bench_cold.selected_layers(Args) == every
