"""Run a kernel module's own source on the CPU: the module's code (defines and inlined headers,
exactly what NVRTC/HIPRTC compile) behind ``host_shim.h``, built with the host C++ compiler into a
shared library with one entry per template instantiation, called through ctypes on NumPy arrays.

Slow (one OS thread per GPU thread) and blind to what only a GPU shows (warp timing, memory
ordering beyond the block barriers, alignment faults), but it executes the kernels' index math,
loops and barriers as written, so the CPU suite can check them against the float64 reference.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SHIM = Path(__file__).with_name("host_shim.h")
_BUILD = Path(tempfile.gettempdir()) / "cupyconv-host-kernels"


def compiler() -> str | None:
    """A C++20 compiler on PATH (g++ or clang++), or None."""
    return shutil.which("g++") or shutil.which("clang++")


class HostModule:
    """A :class:`cupyconv._core.kernels.KernelModule` compiled for the host."""

    def __init__(self, module):
        names = module.name_expressions
        entries = "".join(
            f'extern "C" void host_entry_{i}(void* const* args, const unsigned* dims) '
            f"{{ host_launch(&{name}, args, dims); }}\n" for i, name in enumerate(names))
        code = module.code.replace("extern __shared__", "extern")  # (host_shim.h: __shared__)
        source = f'#include "{SHIM}"\n{code}\n{entries}'
        digest = hashlib.sha256((source + SHIM.read_text()).encode()).hexdigest()[:16]
        _BUILD.mkdir(exist_ok=True)
        lib = _BUILD / f"{digest}.so"
        if not lib.exists():
            # Per-process scratch names: pytest-xdist workers build the same module at once, and
            # a shared .cpp could be compiled while another worker rewrites it (a library
            # missing entries, then cached under the digest).  The finished library is renamed
            # into place atomically.
            tag = f"{os.getpid()}.{id(self)}"
            src = _BUILD / f"{digest}.{tag}.cpp"
            src.write_text(source)
            tmp = _BUILD / f"{digest}.{tag}.so"
            try:
                subprocess.run([compiler(), "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread",
                                "-w", str(src), "-o", str(tmp)], check=True,
                               capture_output=True, text=True)
                tmp.replace(lib)
            finally:
                src.unlink(missing_ok=True)
                tmp.unlink(missing_ok=True)
        self._lib = ctypes.CDLL(str(lib))
        self._index = {name: i for i, name in enumerate(names)}

    def launch(self, name_expression: str, shape, arrays) -> None:
        """Run instantiation ``name_expression`` under ``shape`` (a channels-last LaunchShape:
        grid, block, scalars) on ``arrays`` (NumPy arrays or views: each passed as the address of
        its first element), the packed scalars last."""
        prm = np.array(shape.scalars, dtype=np.int64)
        ptrs = [a.__array_interface__["data"][0] for a in arrays] + [prm.ctypes.data]
        args = (ctypes.c_void_p * len(ptrs))(*ptrs)
        grid = tuple(shape.grid) + (1,) * (3 - len(shape.grid))
        block = tuple(shape.block) + (1,) * (3 - len(shape.block))
        dims = (ctypes.c_uint * 6)(*grid, *block)
        assert shape.smem <= 96 * 1024
        fn = getattr(self._lib, f"host_entry_{self._index[name_expression]}")
        fn(args, dims)

    def call(self, name_expression: str, grid, block, args, smem: int = 0) -> None:
        """Run instantiation ``name_expression`` on ``grid`` x ``block`` with the kernel's own
        argument list, as a GPU launcher passes it: NumPy arrays (or views: the address of the
        first element) and NumPy scalars (``np.int32``, ``np.int64``: passed by value)."""
        keep, ptrs = [], []
        for a in args:
            if isinstance(a, np.ndarray):
                ptrs.append(a.__array_interface__["data"][0])
            else:
                box = np.array([a], dtype=np.asarray(a).dtype)
                keep.append(box)
                ptrs.append(box.ctypes.data)
        argv = (ctypes.c_void_p * len(ptrs))(*ptrs)
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        assert smem <= 96 * 1024
        fn = getattr(self._lib, f"host_entry_{self._index[name_expression]}")
        fn(argv, (ctypes.c_uint * 6)(*grid, *block))


@functools.cache
def host_module(module) -> HostModule:
    """The host build of ``module``, built once per process (every test that runs it shares it)."""
    return HostModule(module)
