"""The convolution layers of ResNet-50, ResNeXt-50 (32x4d), MobileNetV2, EfficientNet-B0 and
ConvNeXt-T (224x224 input), in network order.

Pure Python (no GPU, no cupyconv): ``bench_network.py`` runs these layers as one pass,
``bench_depthwise_nets.py`` and ``experiments/sweep_auto.py`` their depthwise and grouped layers (through
:func:`distinct_layers`), ``bench_train_step.py`` the training step of every distinct layer,
and tests/bench/test_networks.py checks the counts, the chaining, the
multiply-add totals and the parameter counts.

- ``resnet50()``: torchvision's ResNet-50 (v1.5: the stride of a stage's first bottleneck sits
  in its 3x3 conv), 53 convolutions: the 7x7 stem, 16 bottlenecks of 1x1 -> 3x3 -> 1x1, and the
  1x1 projection ("downsample") of each stage's first block, listed after that block's third
  conv as torchvision's forward runs it.  About 4.1e9 multiply-adds per image.
- ``resnext50_32x4d()``: the same network with 32 groups of 4 channels per group in the first
  stage: the bottleneck width is 128/256/512/1024 (twice ResNet-50's) and its 3x3 conv grouped
  (groups=32).  About 4.2e9 multiply-adds per image.
- ``mobilenetv2()``: torchvision's MobileNetV2, width 1.0, 52 convolutions: the 3x3 stride-2
  stem, 17 inverted-residual blocks (expand 1x1, except in the first block whose expansion is 1;
  depthwise 3x3 with groups = channels; project 1x1) and the final 1x1 to 1280 channels.  About
  3.0e8 multiply-adds per image.
- ``efficientnet_b0()``: torchvision's EfficientNet-B0, 81 convolutions: the 3x3 stride-2 stem,
  16 MBConv blocks (expand 1x1 except in the first block; depthwise 3x3 or 5x5; the
  squeeze-excitation pair of 1x1 convs on the pooled 1x1 map; project 1x1) and the final 1x1 to
  1280 channels.  About 3.9e8 multiply-adds per image.
- ``convnext_t()``: ConvNeXt-T (depths 3/3/9/3, widths 96/192/384/768), 58 convolutions: the
  4x4 stride-4 patchify stem, per block a 7x7 depthwise conv (padding 3) and the two pointwise
  layers of its MLP (dim -> 4 dim -> dim) as 1x1 convs (ConvNeXt runs them as Linear layers on
  channels-last activations: the same GEMMs), and the 2x2 stride-2 downsampling convs between
  stages.  About 4.5e9 multiply-adds per image.

Each layer names the layer whose output it reads (``source``), where that output reaches it
unchanged in shape: a residual add keeps the shape of the block's last conv, so a block's first
conv reads that conv; a squeeze-excitation scale keeps the shape of the depthwise output, so the
projection reads the depthwise conv.  ``source`` is None where a non-convolution layer changes
the shape in between (ResNet's max-pool after the stem, the squeeze-excitation's pooling) or for
the network's first layer.  (ConvNeXt's layer norms and GELU keep the shape: every layer but
its stem has a source.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["Layer", "resnet50", "resnext50_32x4d", "mobilenetv2", "efficientnet_b0", "convnext_t",
           "NETWORKS",
           "total_macs", "pass_bytes", "maxpool_out", "distinct_layers"]


@dataclass(frozen=True)
class Layer:
    """One 2-d convolution: square kernel, symmetric padding, no dilation, no bias."""

    in_channels: int
    out_channels: int
    H: int          # input height
    W: int          # input width
    kernel: int
    stride: int
    padding: int
    groups: int = 1
    name: str = ""
    source: str | None = None  # the layer whose output is this layer's input (see module doc)

    @property
    def out_H(self) -> int:
        return (self.H + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def out_W(self) -> int:
        return (self.W + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_channels == self.out_channels

    def input_shape(self, batch: int, layout: str = "NCHW") -> tuple:
        if layout == "NHWC":
            return (batch, self.H, self.W, self.in_channels)
        return (batch, self.in_channels, self.H, self.W)

    def weight_shape(self, layout: str = "NCHW") -> tuple:
        cg = self.in_channels // self.groups
        if layout == "NHWC":
            return (self.out_channels, self.kernel, self.kernel, cg)
        return (self.out_channels, cg, self.kernel, self.kernel)

    def output_shape(self, batch: int, layout: str = "NCHW") -> tuple:
        if layout == "NHWC":
            return (batch, self.out_H, self.out_W, self.out_channels)
        return (batch, self.out_channels, self.out_H, self.out_W)

    def macs(self, batch: int = 1) -> int:
        """Multiply-adds: one per weight tap per output element."""
        per_output = self.in_channels // self.groups * self.kernel * self.kernel
        return batch * self.out_channels * self.out_H * self.out_W * per_output

    def input_elements(self, batch: int = 1) -> int:
        return batch * self.in_channels * self.H * self.W

    def weight_elements(self) -> int:
        return math.prod(self.weight_shape())

    def output_elements(self, batch: int = 1) -> int:
        return batch * self.out_channels * self.out_H * self.out_W


def maxpool_out(size: int, kernel: int = 3, stride: int = 2, padding: int = 1) -> int:
    """Output size of ResNet's stem max-pool (3x3, stride 2, padding 1)."""
    return (size + 2 * padding - kernel) // stride + 1


def _resnet(image: int, groups: int, width_per_group: int) -> tuple[Layer, ...]:
    """torchvision's ResNet-50 family: bottleneck width = planes * width_per_group / 64 * groups
    (planes 64/128/256/512 by stage), the 3x3 conv of every bottleneck in ``groups`` groups."""
    layers = [Layer(3, 64, image, image, 7, 2, 3, name="conv1")]
    size = maxpool_out(layers[0].out_H)
    channels, last = 64, None  # the stem's max-pool output: no conv source
    for stage, (planes, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2),
                                                      (512, 3, 2)), start=1):
        width, out = planes * width_per_group // 64 * groups, 4 * planes
        for b in range(blocks):
            s = stride if b == 0 else 1
            p = f"layer{stage}.{b}"
            c1 = Layer(channels, width, size, size, 1, 1, 0, name=f"{p}.conv1", source=last)
            c2 = Layer(width, width, size, size, 3, s, 1, groups=groups, name=f"{p}.conv2",
                       source=c1.name)
            c3 = Layer(width, out, c2.out_H, c2.out_W, 1, 1, 0, name=f"{p}.conv3", source=c2.name)
            layers += [c1, c2, c3]
            if b == 0:  # projection shortcut: the block input to the block output's shape
                layers.append(Layer(channels, out, size, size, 1, s, 0,
                                    name=f"{p}.downsample", source=last))
            channels, size, last = out, c3.out_H, c3.name
    return tuple(layers)


def resnet50(image: int = 224) -> tuple[Layer, ...]:
    """The 53 convolutions of torchvision's ResNet-50, in the order its forward runs them."""
    return _resnet(image, groups=1, width_per_group=64)


def resnext50_32x4d(image: int = 224) -> tuple[Layer, ...]:
    """The 53 convolutions of torchvision's ResNeXt-50 32x4d: ResNet-50 with bottlenecks twice as
    wide and their 3x3 convs in 32 groups (16 grouped convs; the first of stages 2-4 at stride
    2)."""
    return _resnet(image, groups=32, width_per_group=4)


# MobileNetV2's inverted-residual settings: expansion t, output channels c, blocks n, stride s
_MOBILENETV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenetv2(image: int = 224) -> tuple[Layer, ...]:
    """The 52 convolutions of torchvision's MobileNetV2 (width 1.0), in network order."""
    stem = Layer(3, 32, image, image, 3, 2, 1, name="features.0")
    layers, channels, size, last = [stem], 32, stem.out_H, stem.name
    block = 1
    for t, c, n, s in _MOBILENETV2:
        for i in range(n):
            p = f"features.{block}"
            hidden = channels * t
            dw = _expand_depthwise(layers, p, channels, hidden, size, 3, s if i == 0 else 1, last)
            project = Layer(hidden, c, dw.out_H, dw.out_W, 1, 1, 0, name=f"{p}.project",
                            source=dw.name)
            layers += [dw, project]
            channels, size, last = c, project.out_H, project.name
            block += 1
    layers.append(Layer(channels, 1280, size, size, 1, 1, 0, name=f"features.{block}",
                        source=last))
    return tuple(layers)


def _expand_depthwise(layers: list, p: str, channels: int, hidden: int, size: int, k: int,
                      stride: int, source: str) -> Layer:
    """The head of an inverted-residual block (MobileNetV2, EfficientNet's MBConv): the 1x1
    expansion to ``hidden`` channels (appended to ``layers``; none where hidden == channels) and
    the k x k depthwise conv after it (returned, not appended: the caller orders the rest)."""
    if hidden != channels:
        expand = Layer(channels, hidden, size, size, 1, 1, 0, name=f"{p}.expand", source=source)
        layers.append(expand)
        source = expand.name
    return Layer(hidden, hidden, size, size, k, stride, k // 2, groups=hidden,
                 name=f"{p}.depthwise", source=source)


# EfficientNet-B0's MBConv stages (torchvision's table): expansion t, kernel, stride of the first
# block, output channels, blocks
_EFFICIENTNET_B0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                    (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def efficientnet_b0(image: int = 224) -> tuple[Layer, ...]:
    """The 81 convolutions of torchvision's EfficientNet-B0, in network order (padding
    kernel // 2 throughout; the squeeze-excitation squeezes to a quarter of the block's input
    channels, not of its expanded ones)."""
    stem = Layer(3, 32, image, image, 3, 2, 1, name="features.0")
    layers, channels, size, last = [stem], 32, stem.out_H, stem.name
    for stage, (t, k, s, c, n) in enumerate(_EFFICIENTNET_B0, start=1):
        for i in range(n):
            p = f"features.{stage}.{i}"
            hidden, squeeze = channels * t, max(1, channels // 4)
            dw = _expand_depthwise(layers, p, channels, hidden, size, k, s if i == 0 else 1, last)
            fc1 = Layer(hidden, squeeze, 1, 1, 1, 1, 0, name=f"{p}.se.fc1")  # reads the pooled map
            fc2 = Layer(squeeze, hidden, 1, 1, 1, 1, 0, name=f"{p}.se.fc2", source=fc1.name)
            project = Layer(hidden, c, dw.out_H, dw.out_W, 1, 1, 0, name=f"{p}.project",
                            source=dw.name)
            layers += [dw, fc1, fc2, project]
            channels, size, last = c, project.out_H, project.name
    layers.append(Layer(channels, 1280, size, size, 1, 1, 0, name="features.8", source=last))
    return tuple(layers)


# ConvNeXt-T's stages: (width, blocks)
_CONVNEXT_T = ((96, 3), (192, 3), (384, 9), (768, 3))


def convnext_t(image: int = 224) -> tuple[Layer, ...]:
    """The 58 convolutions of ConvNeXt-T, in network order, named as torchvision's
    ``convnext_tiny`` names its modules: the stem ``features.0`` (4x4, stride 4, 3 -> 96), stage
    ``features.{1,3,5,7}`` of blocks ``.{i}``, each a 7x7 depthwise conv (padding 3, groups =
    width) and the MLP's ``pwconv1`` (width -> 4 width) and ``pwconv2`` (4 width -> width) as
    1x1 convs, and the 2x2 stride-2 downsampling convs ``features.{2,4,6}`` between stages."""
    stem = Layer(3, _CONVNEXT_T[0][0], image, image, 4, 4, 0, name="features.0")
    layers, channels, size, last = [stem], stem.out_channels, stem.out_H, stem.name
    for stage, (width, blocks) in enumerate(_CONVNEXT_T):
        if stage:  # layer norm, then the 2x2 stride-2 conv to the stage's width
            down = Layer(channels, width, size, size, 2, 2, 0, name=f"features.{2 * stage}",
                         source=last)
            layers.append(down)
            channels, size, last = width, down.out_H, down.name
        for i in range(blocks):
            p = f"features.{2 * stage + 1}.{i}"
            dw = Layer(width, width, size, size, 7, 1, 3, groups=width, name=f"{p}.depthwise",
                       source=last)
            pw1 = Layer(width, 4 * width, size, size, 1, 1, 0, name=f"{p}.pwconv1", source=dw.name)
            pw2 = Layer(4 * width, width, size, size, 1, 1, 0, name=f"{p}.pwconv2",
                        source=pw1.name)
            layers += [dw, pw1, pw2]
            last = pw2.name  # the residual add keeps the block's shape
    return tuple(layers)


NETWORKS = {"resnet50": resnet50, "resnext50_32x4d": resnext50_32x4d, "mobilenetv2": mobilenetv2,
            "efficientnet_b0": efficientnet_b0, "convnext_t": convnext_t}


def total_macs(layers, batch: int = 1) -> int:
    return sum(layer.macs(batch) for layer in layers)


def pass_bytes(layers, batch: int, itemsize: int) -> int:
    """Bytes one pass reads as operands: every layer's input and weight once."""
    return itemsize * sum(layer.input_elements(batch) + layer.weight_elements()
                          for layer in layers)


def distinct_layers(networks, keep=lambda layer: True) -> list[tuple[Layer, dict[str, int]]]:
    """The layers of ``networks`` (name -> layers) that ``keep`` selects, once per shape
    (channels, groups, size, kernel, stride, padding), in order of first appearance: (the first
    such layer, {network: how many of its layers have that shape}).  A shape that two networks
    share is one entry counted in both."""
    seen: dict[Layer, tuple[Layer, dict[str, int]]] = {}
    for net, layers in networks.items():
        for layer in layers:
            if keep(layer):
                shape = replace(layer, name="", source=None)
                first, counts = seen.setdefault(shape, (layer, {}))
                counts[net] = counts.get(net, 0) + 1
    return list(seen.values())
