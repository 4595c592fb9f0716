"""Run cupyconv.ndimage on the CPU: NumPy stands in for CuPy, and each kernel launch runs the
module's own CUDA source compiled as host C++ (tests/depthwise/host_kernels.py, host_shim.h).
Launches are counted, so validation tests can check that nothing ran before an error."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "depthwise"))
from host_kernels import compiler, host_module  # noqa: E402


class HostRunner:
    """Patches cupyconv.ndimage (its _ndimage modules) to run on NumPy arrays with host-compiled kernels."""

    def __init__(self, monkeypatch):
        from cupyconv._ndimage import args, passes

        self.launches = []
        # where they are read: args (inputs, outputs, weights) and runners (through args._cupy)
        monkeypatch.setattr(args, "_cupy", lambda: np)
        monkeypatch.setattr(args, "require_array", self._require)
        monkeypatch.setattr(passes, "device_copy", lambda h: np.ascontiguousarray(h))
        monkeypatch.setattr(passes.jit, "get_function", self._get_function)

    @staticmethod
    def _require(a, name):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be an array")
        return a

    def _get_function(self, module, template, dtype, variant=()):
        name = module.name_expression(template, dtype, variant)

        def launch(grid, block, args, shared_mem=0):
            x, w, y, prm = args
            assert x.flags.c_contiguous and y.flags.c_contiguous
            assert not np.may_share_memory(x, y)
            self.launches.append(template)
            shape = SimpleNamespace(scalars=prm, grid=grid, block=block, smem=shared_mem)
            host_module(module).launch(name, shape, (x, w, y))

        return launch
