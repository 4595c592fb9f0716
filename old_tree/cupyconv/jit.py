"""Kernel compilation, public side: compile ahead of time, inspect or clear the module cache.

Kernels compile at first use (NVRTC on NVIDIA, HIPRTC on AMD ROCm); see :mod:`cupyconv._core.jit`
for the cache and its key.
"""

from cupyconv._core.jit import COMPILE_OPTIONS, cache_info, clear_cache, get_function, precompile

__all__ = ["precompile", "cache_info", "clear_cache", "get_function", "COMPILE_OPTIONS"]
