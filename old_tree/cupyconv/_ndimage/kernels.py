"""Kernel modules of cupyconv.ndimage (``kernel_src/ndimage/ndimage.cu``, ``nd_plane.cu``).

Each ndimage.cu kernel is a template over (input storage type, output storage type, compute
type), so an integer or float32 image is read and written in its own type, with no conversion
pass.  One binary per such triple, compiled at first use; :func:`check_modules` names the
representative set the GPU-free compile check builds (each storage type once on each side, each
compute type).  ``nd_plane.cu`` (the row walk) serves real float32/float64 data whose input,
output and compute dtypes agree: one binary per dtype (``ND_PLANE``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cupyconv._core.caches import memoized
from cupyconv._core.kernels import PLANE_SQUARES, PLANE_WIDTHS, KernelModule, plane_width
from cupyconv._ndimage.dtypes import ND_CTYPES, STORAGE_DTYPES, compute_dtype

# Constants shared by the kernels and the launch code (passed as defines; the kernels stop with
# #error where one is missing).
ND_CONSTANTS: dict[str, int] = {
    "ND_THREADS": 256,   # threads per block of nd_line_row, nd_line_direct, nd_dense
    "ND_RX": 5,          # nd_line_row: adjacent outputs per thread (odd: conflict-free)
    "ND_RY": 8,          # nd_line_col: outputs per thread down the axis, compute types <= 8 bytes
    "ND_RY_WIDE": 4,     # ... 16-byte compute types (complex128)
    "ND_MAX_DIMS": 8,    # nd_dense: most dims after merging the unfiltered ones
    "ND_TILE_RX": 5,     # nd_dense_tile: adjacent outputs per thread along a row (odd: conflict-free)
    "ND_TILE_ROWS": 8,   # ... rows of a tile (the block's thread rows; 32 threads per row)
    "ND_TILE_Z": 4,      # ... planes of a tile (each staged input plane serves all of them)
    "ND_STAGE": 4,       # loads each thread has in flight while staging a tile
    "ND_SEP_RY": 8,      # nd_sep2d: outputs per thread down a column (tile: 8 * ND_SEP_RY x 32)
    # boundary modes (nd_boundary.cuh; names in cupyconv._ndimage.boundary)
    "ND_NEAREST": 0,
    "ND_WRAP": 1,
    "ND_REFLECT": 2,
    "ND_MIRROR": 3,
    "ND_CONSTANT": 4,
}

# Storage and compute dtype name -> C++ type of the kernels' templates.
COMPUTE_DTYPES = ("float32", "float64", "complex64", "complex128")
TEMPLATES = ("nd_line_row", "nd_line_col", "nd_line_direct", "nd_dense", "nd_dense_tile",
             "nd_sep2d")
SOURCE = "ndimage/ndimage.cu"


# Template -> the extra template arguments it is instantiated with (the others take none):
# nd_dense_tile's output planes per block, one for 2-d arrays, ND_TILE_Z for 3-d ones.
TEMPLATE_VARIANTS = {"nd_dense_tile": ((1,), (ND_CONSTANTS["ND_TILE_Z"],))}


@dataclass(frozen=True)
class NdModule(KernelModule):
    """A :class:`KernelModule` whose ``dtypes`` are ``"in:out:compute"`` triples, each naming
    the three template arguments of every kernel."""

    @property
    def name_expressions(self) -> tuple[str, ...]:
        return tuple(self.name_expression(t, d, v) for t in self.templates for d in self.dtypes
                     for v in TEMPLATE_VARIANTS.get(t, ((),)))

    def name_expression(self, template: str, dtype: str, variant: tuple[int, ...] = ()) -> str:
        args = [ND_CTYPES[d] for d in dtype.split(":")] + [str(v) for v in self.tile + tuple(variant)]
        return f"{template}<{', '.join(args)}>"


def triple(in_dtype: str, out_dtype: str, compute: str) -> str:
    return f"{in_dtype}:{out_dtype}:{compute}"


@memoized(None)
def nd_module(in_dtype: str, out_dtype: str, compute: str) -> NdModule:
    """The binary of every ndimage kernel for one (input, output, compute) dtype triple."""
    for name, d in (("input", in_dtype), ("output", out_dtype)):
        if d not in ND_CTYPES:
            raise ValueError(f"{name} dtype {d} has no ndimage kernel")
    if compute not in COMPUTE_DTYPES:
        raise ValueError(f"compute dtype {compute} has no ndimage kernel")
    return NdModule(SOURCE, TEMPLATES, (triple(in_dtype, out_dtype, compute),),
                    defines=tuple(ND_CONSTANTS.items()))


# nd_plane (ndimage/nd_plane.cu): the real float filters on the row walk, one binary per dtype
# holding (KWB, KF, SEP) for every filter-width bucket (PLANE_WIDTHS), dense (SEP 0) with any
# size (KF 0) or one of the squares fixed at compile time (PLANE_SQUARES), and separable (SEP 1).
PLANE_DTYPES = ("float32", "float64")
PLANE_VARIANTS = (tuple((kwb, 0, sep) for sep in (0, 1) for kwb in PLANE_WIDTHS)
                  + tuple((plane_width(kf), kf, 0) for kf in PLANE_SQUARES))
ND_PLANE = {d: KernelModule("ndimage/nd_plane.cu", ("nd_plane",), (d,), variants=PLANE_VARIANTS)
            for d in PLANE_DTYPES}


def check_modules() -> tuple[KernelModule, ...]:
    """The modules the compile check builds: every storage type in and out with its default
    compute type, the complex compute types, float32 through float64 (mixed precision), and the
    row-walk modules."""
    out = []
    for d in STORAGE_DTYPES:
        out.append(nd_module(d, d, compute_dtype(d, d, False)))
    out += [nd_module("float32", "complex64", "complex64"), nd_module("uint8", "float64", "float64"),
            nd_module("float32", "float64", "float64"), nd_module("int16", "complex128", "complex128")]
    return tuple(dict.fromkeys(out)) + tuple(ND_PLANE.values())
