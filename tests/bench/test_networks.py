"""benchmarks/networks.py: the conv layers of ResNet-50, ResNeXt-50, MobileNetV2, EfficientNet-B0
and ConvNeXt-T (CPU only)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def networks():
    spec = importlib.util.spec_from_file_location("networks", ROOT / "benchmarks" / "networks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _by_name(layers):
    names = [layer.name for layer in layers]
    assert len(set(names)) == len(names), "layer names must be unique"
    return {layer.name: layer for layer in layers}


def _check_chain(layers):
    """Every layer with a source reads exactly that layer's output (channels and spatial size),
    and the source comes before it in network order."""
    index = {layer.name: i for i, layer in enumerate(layers)}
    by_name = _by_name(layers)
    for i, layer in enumerate(layers):
        if layer.source is None:
            continue
        src = by_name[layer.source]
        assert index[src.name] < i, f"{layer.name} reads {src.name}, which runs later"
        assert (src.out_channels, src.out_H, src.out_W) == (layer.in_channels, layer.H, layer.W), \
            f"{layer.name} input does not match {src.name} output"


def test_resnet50_has_53_convs_with_stem_and_four_projections(networks):
    layers = networks.resnet50()
    assert len(layers) == 53
    stem = layers[0]
    assert (stem.in_channels, stem.out_channels, stem.kernel, stem.stride, stem.padding) == (3, 64, 7, 2, 3)
    assert (stem.H, stem.out_H) == (224, 112)
    downsample = [layer for layer in layers if "downsample" in layer.name]
    assert len(downsample) == 4
    assert all(d.kernel == 1 and d.padding == 0 for d in downsample)
    assert [d.stride for d in downsample] == [1, 2, 2, 2]
    assert [(d.in_channels, d.out_channels) for d in downsample] == [
        (64, 256), (256, 512), (512, 1024), (1024, 2048)]
    kernels = [layer.kernel for layer in layers]
    assert kernels.count(7) == 1 and kernels.count(3) == 16 and kernels.count(1) == 36
    assert all(layer.groups == 1 for layer in layers)


def test_resnet50_layers_chain(networks):
    layers = networks.resnet50()
    _check_chain(layers)
    by_name = _by_name(layers)
    # the stem's 112x112 output goes through the 3x3/2 max-pool (pad 1) into the first stage
    pooled = networks.maxpool_out(by_name["conv1"].out_H)
    assert pooled == 56
    for name in ("layer1.0.conv1", "layer1.0.downsample"):
        assert (by_name[name].in_channels, by_name[name].H) == (64, pooled)
    # a projection reads the block input and lands on the block output's shape
    for stage in range(1, 5):
        d = by_name[f"layer{stage}.0.downsample"]
        c1, c3 = by_name[f"layer{stage}.0.conv1"], by_name[f"layer{stage}.0.conv3"]
        assert (d.in_channels, d.H, d.W) == (c1.in_channels, c1.H, c1.W)
        assert (d.out_channels, d.out_H, d.out_W) == (c3.out_channels, c3.out_H, c3.out_W)
    # every other layer has a source: only the stem and the two readers of the max-pool lack one
    assert sorted(layer.name for layer in layers if layer.source is None) == [
        "conv1", "layer1.0.conv1", "layer1.0.downsample"]
    last = layers[-1]
    assert (last.out_channels, last.out_H, last.out_W) == (2048, 7, 7)


def test_resnet50_multiply_adds(networks):
    layers = networks.resnet50()
    macs = networks.total_macs(layers)
    # torchvision's published 4.09 GFLOPS (multiply-adds) include the 2048x1000 classifier
    assert macs == pytest.approx(4.09e9 - 2048 * 1000, rel=0.005)
    assert macs == 4_087_136_256
    assert 2 * macs == pytest.approx(8.2e9, rel=0.01)          # flops at 2 per multiply-add
    assert networks.total_macs(layers, batch=32) == 32 * macs
    # 25.56 M parameters in all, less the classifier (2.05 M) and batch norms (53 k)
    assert sum(layer.weight_elements() for layer in layers) == 23_454_912


def test_mobilenetv2_has_52_convs(networks):
    layers = networks.mobilenetv2()
    # stem + first block (depthwise, project) + 16 blocks x (expand, depthwise, project) + last
    assert len(layers) == 1 + 2 + 16 * 3 + 1 == 52
    depthwise = [layer for layer in layers if layer.groups > 1]
    assert len(depthwise) == 17
    assert all(d.depthwise and d.kernel == 3 and d.padding == 1 for d in depthwise)
    assert [d.stride for d in depthwise] == [1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]
    assert sum("expand" in layer.name for layer in layers) == 16
    assert sum("project" in layer.name for layer in layers) == 17
    stem, last = layers[0], layers[-1]
    assert (stem.in_channels, stem.out_channels, stem.kernel, stem.stride, stem.out_H) == (3, 32, 3, 2, 112)
    assert (last.in_channels, last.out_channels, last.kernel, last.H) == (320, 1280, 1, 7)
    # the first block has no expansion: its depthwise conv reads the stem directly
    assert layers[1].depthwise and layers[1].source == "features.0" and layers[1].in_channels == 32


def test_mobilenetv2_layers_chain(networks):
    layers = networks.mobilenetv2()
    _check_chain(layers)
    assert [layer.name for layer in layers if layer.source is None] == ["features.0"]
    # the spatial sizes of the stages: 112 -> 56 -> 28 -> 14 -> 7
    sizes = sorted({layer.H for layer in layers if layer.depthwise}, reverse=True)
    assert sizes == [112, 56, 28, 14, 7]
    projects = [layer.out_channels for layer in layers if "project" in layer.name]
    assert projects == [16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320]


def test_mobilenetv2_multiply_adds(networks):
    layers = networks.mobilenetv2()
    macs = networks.total_macs(layers)
    # the paper's 300 M multiply-adds include the 1280x1000 classifier
    assert macs == pytest.approx(300e6 - 1280 * 1000, rel=0.01)
    assert macs == 299_494_272
    # 3.50 M parameters in all, less the classifier (1.28 M) and batch norms (34 k)
    assert sum(layer.weight_elements() for layer in layers) == 2_189_760


def test_shapes_and_pass_bytes(networks):
    layer = networks.Layer(144, 144, 56, 56, 3, 2, 1, groups=144, name="dw")
    assert layer.out_H == layer.out_W == 28
    assert layer.input_shape(8) == (8, 144, 56, 56)
    assert layer.input_shape(8, "NHWC") == (8, 56, 56, 144)
    assert layer.weight_shape() == (144, 1, 3, 3)
    assert layer.weight_shape("NHWC") == (144, 3, 3, 1)
    assert layer.output_shape(2, "NHWC") == (2, 28, 28, 144)
    assert layer.macs(2) == 2 * 144 * 28 * 28 * 9
    both = [layer, networks.Layer(3, 8, 10, 10, 1, 1, 0)]
    assert networks.pass_bytes(both, 2, 4) == 4 * (2 * 144 * 56 * 56 + 144 * 9 + 2 * 3 * 100 + 24)
    for name, build in networks.NETWORKS.items():
        assert build() == build(224), name


def _torchvision_parameters(layers, classifier_in, *, conv_bias=lambda layer: False):
    """Parameters of the whole torchvision model, from its conv layers: conv weights, a batch
    norm (weight and bias) after every conv without a bias, the biased convs' biases, and the
    classifier (``classifier_in`` x 1000 and its bias)."""
    total = classifier_in * 1000 + 1000
    for layer in layers:
        total += layer.weight_elements()
        total += layer.out_channels if conv_bias(layer) else 2 * layer.out_channels
    return total


def test_parameter_counts_are_torchvision_s(networks):
    # torchvision's published totals: every conv of the tables, nothing more, nothing less
    assert _torchvision_parameters(networks.resnet50(), 2048) == 25_557_032
    assert _torchvision_parameters(networks.resnext50_32x4d(), 2048) == 25_028_904
    assert _torchvision_parameters(networks.mobilenetv2(), 1280) == 3_504_872
    # EfficientNet-B0's squeeze-excitation convs carry biases and no batch norm
    assert _torchvision_parameters(networks.efficientnet_b0(), 1280,
                                   conv_bias=lambda layer: ".se." in layer.name) == 5_288_548


def test_resnext50_grouped_convs(networks):
    layers = networks.resnext50_32x4d()
    assert len(layers) == 53
    _check_chain(layers)
    grouped = [layer for layer in layers if layer.groups > 1]
    assert len(grouped) == 16 and all(g.groups == 32 and not g.depthwise for g in grouped)
    assert all(g.kernel == 3 and g.padding == 1 and g.name.endswith("conv2") for g in grouped)
    # width 128/256/512/1024 (4 channels per group in the first stage), spatial 56/28/14/7; the
    # first block of stages 2-4 strides in its grouped conv, at the previous stage's size
    assert [(g.in_channels, g.H, g.stride, g.out_H) for g in grouped] == (
        [(128, 56, 1, 56)] * 3 + [(256, 56, 2, 28)] + [(256, 28, 1, 28)] * 3
        + [(512, 28, 2, 14)] + [(512, 14, 1, 14)] * 5 + [(1024, 14, 2, 7)]
        + [(1024, 7, 1, 7)] * 2)
    assert grouped[0].weight_shape() == (128, 4, 3, 3)
    # the rest is ResNet-50's: the same stem, projections and output channels
    resnet = networks.resnet50()
    assert [(r.out_channels, r.out_H) for r in resnet if "conv3" in r.name] == [
        (x.out_channels, x.out_H) for x in layers if "conv3" in x.name]
    # torchvision's 4.23 GFLOPS (multiply-adds) include the 2048x1000 classifier
    assert networks.total_macs(layers) == pytest.approx(4.23e9 - 2048 * 1000, rel=0.005)


def test_mobilenetv2_depthwise_channels(networks):
    dw = [layer for layer in networks.mobilenetv2() if layer.depthwise]
    assert [d.in_channels for d in dw] == [32, 96, 144, 144, 192, 192, 192, 384, 384, 384, 384,
                                           576, 576, 576, 960, 960, 960]
    assert [d.H for d in dw] == [112, 112, 56, 56, 28, 28, 28, 14, 14, 14, 14, 14, 14, 14, 7, 7, 7]
    assert all(d.out_H == -(-d.H // d.stride) for d in dw)


def test_efficientnet_b0_has_81_convs_and_16_depthwise(networks):
    layers = networks.efficientnet_b0()
    # stem + first block (depthwise, SE pair, project) + 15 blocks x (expand, depthwise, SE pair,
    # project) + last
    assert len(layers) == 1 + 4 + 15 * 5 + 1 == 81
    _check_chain(layers)
    # only the stem and the squeeze-excitation's first convs (on the pooled map) have no source
    assert sorted(layer.name for layer in layers if layer.source is None) == sorted(
        ["features.0"] + [layer.name for layer in layers if layer.name.endswith("se.fc1")])
    dw = [layer for layer in layers if layer.depthwise]
    assert len(dw) == 16
    assert [d.in_channels for d in dw] == [32, 96, 144, 144, 240, 240, 480, 480, 480, 672, 672,
                                           672, 1152, 1152, 1152, 1152]
    assert [d.kernel for d in dw] == [3, 3, 3, 5, 5, 3, 3, 3, 5, 5, 5, 5, 5, 5, 5, 3]
    assert [d.stride for d in dw] == [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1]
    assert [d.H for d in dw] == [112, 112, 56, 56, 28, 28, 14, 14, 14, 14, 14, 14, 7, 7, 7, 7]
    assert all(d.padding == d.kernel // 2 and d.out_H == -(-d.H // d.stride) for d in dw)
    se = [layer for layer in layers if ".se." in layer.name]
    assert len(se) == 32 and all(s.H == 1 and s.kernel == 1 for s in se)
    # the squeeze is a quarter of the block's input channels: 32 // 4 in the first block
    assert (se[0].in_channels, se[0].out_channels) == (32, 8)
    last = layers[-1]
    assert (last.in_channels, last.out_channels, last.H) == (320, 1280, 7)
    # torchvision's 0.39 GFLOPS (multiply-adds) include the 1280x1000 classifier
    assert networks.total_macs(layers) == pytest.approx(0.386e9 - 1280 * 1000, rel=0.01)


def test_distinct_layers_count_each_shape_per_network(networks):
    nets = {"mobilenetv2": networks.mobilenetv2(), "efficientnet_b0": networks.efficientnet_b0()}
    dw = networks.distinct_layers(nets, lambda layer: layer.depthwise)
    # 10 shapes in MobileNetV2, 12 in EfficientNet-B0, 3 of them shared (the 3x3 layers at 112^2
    # and 144 channels at 56^2 stride 1)
    assert len(dw) == 19
    assert sum(counts.get("mobilenetv2", 0) for _, counts in dw) == 17
    assert sum(counts.get("efficientnet_b0", 0) for _, counts in dw) == 16
    shared = [(layer.in_channels, layer.H, layer.stride) for layer, counts in dw
              if len(counts) == 2]
    assert shared == [(32, 112, 1), (96, 112, 2), (144, 56, 1)]
    first, counts = dw[6]
    assert (first.name, first.in_channels, counts) == ("features.8.depthwise", 384,
                                                       {"mobilenetv2": 4})
    grouped = networks.distinct_layers({"resnext50_32x4d": networks.resnext50_32x4d()},
                                       lambda layer: layer.groups > 1)
    assert [counts["resnext50_32x4d"] for _, counts in grouped] == [3, 1, 3, 1, 5, 1, 2]
    assert networks.distinct_layers(nets, lambda layer: False) == []


def test_convnext_t_has_58_convs_in_four_stages(networks):
    layers = networks.convnext_t()
    # stem + 18 blocks x (depthwise, pwconv1, pwconv2) + 3 downsampling convs
    assert len(layers) == 1 + 18 * 3 + 3 == 58
    _check_chain(layers)
    assert [layer.name for layer in layers if layer.source is None] == ["features.0"]
    stem = layers[0]
    assert (stem.in_channels, stem.out_channels, stem.kernel, stem.stride, stem.padding) == (
        3, 96, 4, 4, 0)
    assert stem.output_shape(32) == (32, 96, 56, 56)
    assert stem.output_shape(32, "NHWC") == (32, 56, 56, 96)
    down = [layer for layer in layers if layer.kernel == 2]
    assert [(d.name, d.in_channels, d.out_channels, d.H, d.out_H) for d in down] == [
        ("features.2", 96, 192, 56, 28), ("features.4", 192, 384, 28, 14),
        ("features.6", 384, 768, 14, 7)]
    assert all(d.stride == 2 and d.padding == 0 and d.groups == 1 for d in down)
    dw = [layer for layer in layers if layer.groups > 1]
    assert len(dw) == 18 and all(d.depthwise for d in dw)
    assert all(d.kernel == 7 and d.padding == 3 and d.stride == 1 and d.out_H == d.H for d in dw)
    assert [(d.in_channels, d.H) for d in dw] == (
        [(96, 56)] * 3 + [(192, 28)] * 3 + [(384, 14)] * 9 + [(768, 7)] * 3)
    assert dw[0].weight_shape() == (96, 1, 7, 7) and dw[0].weight_shape("NHWC") == (96, 7, 7, 1)
    # the MLP as 1x1 convs: dim -> 4 dim -> dim at the stage's size
    pw1 = [layer for layer in layers if layer.name.endswith("pwconv1")]
    pw2 = [layer for layer in layers if layer.name.endswith("pwconv2")]
    assert [(p.in_channels, p.out_channels) for p in pw1] == [(d.in_channels, 4 * d.in_channels)
                                                              for d in dw]
    assert [(p.in_channels, p.out_channels) for p in pw2] == [(4 * d.in_channels, d.in_channels)
                                                              for d in dw]
    assert all(p.kernel == 1 and p.stride == 1 and p.out_H == p.H for p in pw1 + pw2)
    assert pw1[0].output_shape(32) == (32, 384, 56, 56)
    assert layers[-1].output_shape(1) == (1, 768, 7, 7)
    assert layers[1].name == "features.1.0.depthwise" and layers[-1].name == "features.7.2.pwconv2"


def test_convnext_t_multiply_adds_and_parameters(networks):
    layers = networks.convnext_t()
    macs = networks.total_macs(layers)
    # the paper's 4.5 G "FLOPs" are multiply-adds (with the 768x1000 classifier and norms)
    assert macs == pytest.approx(4.5e9, rel=0.15)
    assert macs == 4_454_763_264
    assert networks.total_macs(networks.resnet50()) == pytest.approx(4.1e9, rel=0.15)
    # 28.59 M parameters in all (timm's and torchvision's convnext_tiny): conv weights and biases,
    # a layer norm after the stem, before each downsampling conv, in each block and before the
    # classifier, each block's layer scale, the 768 x 1000 classifier
    total = sum(layer.weight_elements() + layer.out_channels for layer in layers)
    total += 2 * 96 + sum(2 * layer.in_channels for layer in layers if layer.kernel == 2)
    total += sum(3 * layer.in_channels for layer in layers if layer.depthwise)
    total += 2 * 768 + 768 * 1000 + 1000
    assert total == 28_589_128
    distinct = networks.distinct_layers({"convnext_t": layers})
    assert len(distinct) == 16
    assert sum(counts["convnext_t"] for _, counts in distinct) == 58
