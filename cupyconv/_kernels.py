"""The kernel registry: every compiled specialization the package may launch, named in one place.

A :class:`KernelModule` is the unit of compilation: one source file from ``kernel_src/`` plus the
``-D`` defines and template instantiations that turn it into one binary.  The JIT layer compiles
these at first use on the device; the GPU-free compile check (``cupyconv._compile_check``) compiles
every entry of :data:`REGISTRY` for NVIDIA and AMD targets, so CI proves that everything the
package can launch builds on both vendors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

KERNEL_DIR = Path(__file__).with_name("kernel_src")

# dtype name -> the C++ type that the kernels' templates are instantiated with.
CTYPES = {"float16": "__half", "float32": "float", "float64": "double"}
DTYPES = tuple(CTYPES)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)


@dataclass(frozen=True)
class KernelModule:
    """One source file compiled with fixed defines, instantiating ``templates`` for ``dtypes``.

    Every field changes the binary, so the frozen instance itself is the (backend-independent)
    part of the compile-cache key.
    """

    source: str
    templates: tuple[str, ...]
    dtypes: tuple[str, ...] = DTYPES
    defines: tuple[tuple[str, int], ...] = ()

    def name_expression(self, template: str, dtype: str) -> str:
        return f"{template}<{CTYPES[dtype]}>"

    @property
    def name_expressions(self) -> tuple[str, ...]:
        return tuple(self.name_expression(t, d) for t in self.templates for d in self.dtypes)

    @property
    def code(self) -> str:
        """Self-contained source: defines first, then the file with its local includes inlined.

        Inlining keeps every byte that affects the binary inside the string that CuPy hashes for
        its on-disk cache (it does not hash included headers), and lets HIPRTC and NVRTC compile
        without include paths.
        """
        head = "".join(f"#define {k} {v}\n" for k, v in self.defines)
        return head + load_source(self.source)


@lru_cache(maxsize=None)
def load_source(name: str) -> str:
    """Text of ``kernel_src/name`` with each local ``#include "x.cuh"`` inlined once."""
    seen: set[str] = set()

    def expand(file: str) -> str:
        path = KERNEL_DIR / file
        if not path.is_file():
            raise FileNotFoundError(f"kernel source {file!r} not found in {KERNEL_DIR}")
        seen.add(file)

        def sub(m):
            inc = m.group(1)
            return "" if inc in seen else expand(inc)

        return f"// ---- {file}\n" + _INCLUDE.sub(sub, path.read_text())

    return expand(name)


DIRECT_CONV = KernelModule("direct_conv.cu", ("direct_conv",))
IM2COL = KernelModule("im2col.cu", ("im2col",))

REGISTRY: tuple[KernelModule, ...] = (DIRECT_CONV, IM2COL)
