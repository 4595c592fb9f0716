"""Which problems the depthwise family takes: one input channel per group.  Which of its kernels
runs a pass is the launchers' choice (:mod:`cupyconv._depthwise.launch`)."""

from __future__ import annotations

from cupyconv._core.geometry import ConvGeometry


def is_depthwise(geom: ConvGeometry) -> bool:
    """One input channel per group (a single-channel input counts: its K outputs are a channel
    multiplier of K)."""
    return geom.groups == geom.in_channels


def depthwise_applicable(geom: ConvGeometry) -> bool:
    """The depthwise kernels run every depthwise problem (the gather kernels have no limits)."""
    return is_depthwise(geom)
