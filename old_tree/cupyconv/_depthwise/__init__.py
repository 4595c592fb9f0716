"""Depthwise kernel family: row-walk, tile and gather kernels for all three passes, and the fused
depthwise->pointwise kernel (sources in ``kernel_src/depthwise``)."""
