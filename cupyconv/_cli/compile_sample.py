"""The demo's compile check without a GPU (and the clang targets' share of the full check): a
representative sample of the kernel modules -- one template instantiation per (kernel source,
kernel template, dtype class, GEMM main loop) -- and the targets the demo compiles it for.
:mod:`cupyconv._cli.compile_check` runs it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cupyconv._cli import compilers
from cupyconv._core.kernels import KernelModule, main_loop


def dtype_class(dtype: str) -> str:
    """The class of a module's dtype for the sample: each float type is its own (float16 and
    bfloat16 take different code paths: intrinsics, tensor-core instructions, AMD's bfloat16
    struct), complex64/complex128 are "complex", the integer types "integer"; an ndimage
    "in:out:compute" triple is the classes of its parts."""
    def one(d):
        if d.startswith("complex"):
            return "complex"
        return "integer" if d.startswith(("int", "uint")) else d

    return ":".join(one(d) for d in dtype.split(":"))


@dataclass(frozen=True)
class Sample:
    """Some of a module's template instantiations, compiled from the module's own source text:
    quacks like a KernelModule (``code``, ``name_expressions``, ``source``, ``vendors``)."""

    module: KernelModule
    name_expressions: tuple

    @property
    def code(self) -> str:
        return self.module.code

    @property
    def source(self) -> str:
        return self.module.source

    @property
    def vendors(self) -> tuple:
        return self.module.vendors


def sample(modules) -> tuple[Sample, ...]:
    """The demo's representative subset of the kernel ``modules``: one
    template instantiation for each (source file, kernel template, dtype class, GEMM main loop),
    compiled in the module it comes from (its defines and source text), so every kernel source
    is compiled for every dtype class it serves and every GEMM source on each of its main loops.
    Of the candidates, the first in registry order among the modules of the smallest tile (the
    cheapest to compile: a 64x64 GEMM tile compiles in about half the time of a 128x128 one).
    Chosen by this rule, so new modules join by themselves."""
    chosen: dict[tuple, tuple] = {}
    for m in sorted(modules, key=lambda m: math.prod(m.tile)):  # (stable: registry order)
        for t in m.templates:
            for d in m.dtypes:
                key = (m.source, t, dtype_class(d), main_loop(m))
                if key not in chosen:
                    chosen[key] = (m, replace(m, templates=(t,), dtypes=(d,)).name_expressions[0])
    by_module: dict = {}
    for m, ne in chosen.values():
        by_module.setdefault(m, []).append(ne)
    return tuple(Sample(m, tuple(nes)) for m, nes in by_module.items())


def sample_targets() -> list[tuple[str, str]]:
    """The demo's targets: NVIDIA_ARCHS and, where an AMD compiler is installed, one AMD target:
    gfx90a with HIPRTC (the compiler ROCm runs at first use), else gfx942 with clang."""
    nvidia = [("nvidia", a) for a in compilers.NVIDIA_ARCHS]
    try:
        compilers._load_hiprtc()
        return nvidia + [("amd", compilers.AMD_ARCHS[0])]
    except compilers.CompilerMissing:
        pass
    clang = compilers.CLANG_ARCHS[0]
    return nvidia + ([("clang", clang)] if compilers.clang_for(clang) else [])
