"""Tiled-GEMM kernel family: dense GEMM, implicit-GEMM forward, backward-data phases, backward-weight,
im2col/col2im (sources in ``kernel_src/gemm``)."""
