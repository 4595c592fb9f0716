"""What a kernel module is: :class:`KernelModule` (one source file from ``kernel_src/`` plus the
``-D`` defines and template instantiations that make one binary), how its self-contained source
is assembled (:func:`load_source`: local includes inlined), the dtype -> C++ type names of the
instantiations, and :data:`KERNEL_CONSTANTS`, the constants the Python plans and the kernels
share.  Which modules exist is :mod:`cupyconv._core.kernels`' business (the registry)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from cupyconv._core.caches import memoized

KERNEL_DIR = Path(__file__).resolve().parents[1] / "kernel_src"

# dtype name -> the C++ type that the kernels' templates are instantiated with.
CTYPES = {"float16": "__half", "bfloat16": "cc::bf16", "float32": "float", "float64": "double"}
DTYPES = tuple(CTYPES)
# Extra compute types of the signal API's filter kernel (complex; integers wrap in uint64).
SIGNAL_CTYPES = {"complex64": "cc::complex<float>", "complex128": "cc::complex<double>",
                 "uint64": "unsigned long long"}

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$", re.MULTILINE)


# Constants that the Python plans and the kernels both depend on: written once here and defined
# in front of each module whose source names them (the kernels stop with #error where one is
# missing), so a change reaches both sides -- and only the modules that use it: every compile
# cache is keyed by the module's text.  Tile shapes travel as template arguments
# (KernelModule.tile).
KERNEL_CONSTANTS: dict[str, int] = {
    "CC_COPY_DIMS": 6,      # dims of the strided-copy kernel (common/copy.cu)
    "DW_THREADS": 256,      # depthwise tile/gather kernels: threads per block
    "DW_ROWS": 8,           # ... most output rows per thread (register accumulators)
    "DW_TAPS": 16,          # ... taps per backward-weight pass (register accumulators)
    "DW_MAX_Z": 64,         # ... most planes per block
    "DWCL_RX": 4,           # channels-last depthwise: destination pixels per run (row walk)
    "DWCL_ACC": 36,         # ... backward-weight accumulators per thread (compute type)
    "DWCL_TAPS": 18,        # ... backward-weight taps per pass, at most
    "CHUNK_SUM_SEGMENTS": 32,  # backward-weight chunk sum (chunk_sum.cu): most chunk segments
    "DWCL_MIN_BLOCKS": 2,   # ... forward/backward-data: blocks per SM (caps registers at 128)
    "DWCL_T2_MIN_BLOCKS": 3,  # ... backward-data at W stride 2 (85 registers; 2: 0.8-0.95x as fast)
    "DWCL_WGRAD_MIN_BLOCKS": 2,  # ... backward-weight: blocks per SM (its plan fills one wave)
    "DWCL_WGRAD_UNROLL": 1,  # ... backward-weight: runs unrolled together (loads in flight)
    "DWB_THREADS": 256,     # depthwise band kernel (depthwise_bands.cu): threads per block
    "DWB_RX": 4,            # ... destination columns per item
    "DWB_MIN_BLOCKS": 6,    # ... blocks per SM (caps registers at 40; 4 and 8 measured slower)
    "NAN_SCAN_UNROLL": 4,   # repair pass (direct_conv.cu for_each_nan): 16-byte loads per thread-step
    "GC_THREADS": 256,      # grouped direct kernel (grouped_conv.cu): threads per block
    "GC_WEIGHTS": 4096,     # ... weights staged in shared memory at once (accumulator type)
    "GC_MAX_TAPS": 32,      # ... most kernel taps (a pixel's valid taps are the bits of a word)
    "SEP_THREADS": 256,     # fused separable kernel: threads per block
    "SEP_CC": 16,           # ... most intermediate channels per chunk
    "FP_WARPS": 8,          # signal plane kernel: warps per block
    "FP_TW": 128,           # ... output columns per strip (4 per lane)
    "FP_CHUNKS": 2,         # ... row chunks per warp
    "FP_RY_NARROW": 4,      # plane row walk: output rows per chunk, types of <= 4 bytes
    "FP_RY_WIDE": 2,        # ... wider types
    "FD_THREADS": 256,      # signal direct kernel: threads per block
    "FD_RX_NARROW": 9,      # ... outputs per thread, types of <= 4 bytes
    "FD_RX_MEDIUM": 5,      # ... <= 8 bytes
    "FD_RX_WIDE": 3,        # ... wider (complex128)
    "MMA_STAGES": 4,        # tensor-core GEMM loop: k-slices resident (NVIDIA, cp.async)
    "MMA_STAGES_AMD": 2,    # ... on AMD (synchronous copies; 64 KB of LDS)
    "GEMM_RASTER_M": 8,     # GEMM-family kernels: m tiles per band of the block order (block_tile)
    "TF32_ROUND_STAGE": 1,  # Hopper loop: round TF32 slices in place (0: as they land; experiments)
    # Activation codes of the fused epilogues (common/activation.cuh; names in _core/activation.py)
    "CC_ACT_NONE": 0,
    "CC_ACT_RELU": 1,
    "CC_ACT_RELU6": 2,
    "CC_ACT_SILU": 3,
    "CC_ACT_GELU": 4,       # exact: x * Phi(x) through erf
    "CC_ACT_GELU_TANH": 5,  # tanh approximation
}


@dataclass(frozen=True)
class KernelModule:
    """One source file compiled with fixed defines, instantiating ``templates`` for ``dtypes``.

    A kernel template's arguments are ``<ctype, *tile, *variant>``: ``tile`` is fixed per module
    (a tile shape, so each tile configuration is its own binary) and every entry of ``variants``
    (e.g. the layout) is instantiated in the same binary.  Every field changes the binary, so the
    frozen instance itself is the (backend-independent) part of the compile-cache key.
    """

    source: str
    templates: tuple[str, ...]
    dtypes: tuple[str, ...] = DTYPES
    defines: tuple[tuple[str, int], ...] = ()
    tile: tuple[int, ...] = ()
    variants: tuple[tuple[int, ...], ...] = ((),)
    vendors: tuple[str, ...] = ("nvidia", "amd")  # whose devices may launch it (compile check)

    def name_expression(self, template: str, dtype: str, variant: tuple[int, ...] = ()) -> str:
        args = ({**CTYPES, **SIGNAL_CTYPES}[dtype],) + tuple(map(str, self.tile + tuple(variant)))
        return f"{template}<{', '.join(args)}>"

    @property
    def name_expressions(self) -> tuple[str, ...]:
        return tuple(self.name_expression(t, d, v) for t in self.templates for d in self.dtypes
                     for v in self.variants)

    def for_dtype(self, dtype: str) -> "KernelModule":
        """The module the JIT compiles for launches of ``dtype``: this one with its
        instantiations of that dtype only.  A module shared by every dtype (split-K reduction,
        im2col, the copies) compiled all of them at a call's first use, 3-6x the time of one
        (NVRTC, sm_90a: split-K reduce 0.45 against 0.15 s, copy.cu 1.03 against 0.16 s for one
        instantiation; benchmarks/notes/host.md, session 29).  The registry and the compile
        check keep the whole module: the instantiations are the same, grouped differently."""
        if self.dtypes == (dtype,):
            return self
        if dtype not in self.dtypes:
            raise ValueError(f"{self.source} has no {dtype} instantiations ({self.dtypes})")
        return replace(self, dtypes=(dtype,))

    def units(self) -> tuple["KernelModule", ...]:
        """The modules the JIT compiles for this one (:meth:`for_dtype` of each dtype)."""
        return tuple(self.for_dtype(d) for d in self.dtypes)

    @property
    def code(self) -> str:
        """Self-contained source: defines first, then the file with its local includes inlined.

        Inlining keeps every byte that affects the binary inside the string that CuPy hashes for
        its on-disk cache (it does not hash included headers), and lets HIPRTC and NVRTC compile
        without include paths.
        """
        head = "".join(f"#define {k} {v}\n"
                       for k, v in tuple(self.defines) + constants_named(self.source))
        return head + load_source(self.source)


@memoized(None)
def constants_named(name: str) -> tuple[tuple[str, int], ...]:
    """The :data:`KERNEL_CONSTANTS` entries that ``kernel_src/name``, its includes inlined, names
    as whole identifiers: the defines in front of its modules.  (Before, every module carried
    every constant, so adding one recompiled all 384 modules for every target.)"""
    text = load_source(name)
    return tuple((k, v) for k, v in KERNEL_CONSTANTS.items() if re.search(rf"\b{k}\b", text))


@memoized(None)
def load_source(name: str) -> str:
    """Text of ``kernel_src/name`` (``<family>/<file>``) with each local ``#include "x.cuh"``
    inlined once.  An include is looked up beside the including file, then in ``common/``."""
    seen: set[str] = set()

    def find(inc: str, beside: Path) -> Path:
        for path in (beside / inc, KERNEL_DIR / "common" / inc):
            if path.is_file():
                return path
        raise FileNotFoundError(f"kernel source {inc!r} not found beside {beside} or in "
                                f"{KERNEL_DIR / 'common'}")

    def expand(path: Path) -> str:
        seen.add(path)

        def sub(m):
            inc = find(m.group(1), path.parent)
            return "" if inc in seen else expand(inc)

        text = _PRAGMA_ONCE.sub("", path.read_text())  # once-only inclusion is done here
        return f"// ---- {path.relative_to(KERNEL_DIR)}\n" + _INCLUDE.sub(sub, text)

    path = KERNEL_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {name!r} not found in {KERNEL_DIR}")
    return expand(path)
