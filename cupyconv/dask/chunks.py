"""What runs on one chunk: Dask itself (imported on first use), the backend a chunk's array type
picks, the staging of NumPy chunks to the GPU (``gpu=True``), and weights held once per graph and
copied once per device."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict

import numpy as np


# --------------------------------------------------------------------------- dask and backends
def _dask_array():
    try:
        import dask.array as da
    except ImportError as exc:  # the optional extra is missing
        raise ImportError("cupyconv.dask needs Dask: pip install 'cupyconv[dask]' "
                          "(or pip install 'dask[array]')") from exc
    return da


def _require_dask(x, name: str = "input"):
    da = _dask_array()
    if not isinstance(x, da.Array):
        raise TypeError(f"{name} must be a dask.array.Array, got {type(x).__name__}; wrap it with "
                        f"dask.array.from_array({name}, chunks=...) or call cupyconv.ndimage on "
                        f"the whole array")
    return x


def _is_cupy(block) -> bool:
    return hasattr(block, "__cuda_array_interface__")


# Per family of functions, the module a chunk runs: (for CuPy chunks, for NumPy chunks).  The
# NumPy stand-ins take the same names and arguments (cupyconv.reference computes in float64).
_BACKENDS = {"ndimage": ("cupyconv.ndimage", "scipy.ndimage"),
             "signal": ("cupyconv.signal", "scipy.signal"),
             "conv": ("cupyconv", "cupyconv.reference")}


def _backend(block, family: str = "ndimage"):
    """The module that runs one chunk -- the one place the chunk's array type picks the backend:
    ``cupyconv.ndimage`` / ``cupyconv.signal`` / ``cupyconv`` for CuPy chunks, ``scipy.ndimage`` /
    ``scipy.signal`` / ``cupyconv.reference`` (same names and signatures) for NumPy chunks."""
    import importlib

    return importlib.import_module(_BACKENDS[family][0 if _is_cupy(block) else 1])


def _staged(block_fn, gpu):
    """``block_fn`` as the chunk function of a map: with ``gpu`` true, a NumPy chunk (with its
    halo) is copied to the current GPU, ``block_fn`` runs there and its result is copied back;
    otherwise (and for CuPy chunks) ``block_fn`` runs on the chunk as it is.  A partial of a
    module-level function, so the graph pickles and tokenizes by value."""
    if gpu is None or gpu is False:
        return block_fn
    if gpu is not True:
        raise TypeError(f"gpu must be None, False or True, got {gpu!r}")
    return functools.partial(_on_gpu, block_fn)


def _on_gpu(block_fn, block, *args, **kwargs):
    """``block_fn`` on a CuPy copy of a NumPy ``block``, its result copied back (CuPy blocks run
    as they are)."""
    if _is_cupy(block):
        return block_fn(block, *args, **kwargs)
    import cupy

    return cupy.asnumpy(block_fn(cupy.asarray(block), *args, **kwargs))


def _contiguous_block(block_fn, block, **kwargs):
    """``block_fn`` on a C-contiguous ``block``: a block may be a zero-strided view (a pad chunk
    thicker than the window, left alone by the rechunk); the kernels take C-contiguous arrays."""
    if _is_cupy(block):
        import cupy

        return block_fn(cupy.ascontiguousarray(block), **kwargs)
    return block_fn(np.ascontiguousarray(block), **kwargs)


# --------------------------------------------------------------------------- weights
# Weights and biases travel as one graph key (_shared): a distributed scheduler sends them to
# each worker once, not with every task.  Each worker then keeps one device copy per device
# (_for_block), made by its first CuPy block and reused by later ones.  The cache holds the host
# tuple it was made from, so the id in its key cannot be reused while the entry lives.
_COPIES_MAX = 16
_copies: OrderedDict = OrderedDict()   # (id(arrays), device id) -> (arrays, device copies)
_copies_lock = threading.Lock()


def _shared(arrays: tuple):
    """``arrays`` (weights and biases, None allowed) as one dask key, a task argument."""
    import dask

    return dask.delayed(arrays, pure=True, traverse=False)


def _for_block(arrays: tuple, block) -> tuple:
    """``arrays`` in the block's array type: host arrays for a NumPy block; for a CuPy block,
    CuPy arrays on the block's device, copied once per device and reused."""
    if not _is_cupy(block):
        return tuple(_host(a) for a in arrays)
    import cupy

    key = (id(arrays), block.device.id)
    with _copies_lock:
        hit = _copies.get(key)
        if hit is not None:
            _copies.move_to_end(key)
            return hit[1]
    with block.device:
        copies = tuple(None if a is None else cupy.asarray(a) for a in arrays)
    with _copies_lock:
        _copies[key] = (arrays, copies)
        while len(_copies) > _COPIES_MAX:
            _copies.popitem(last=False)
    return copies


def _host(a):
    return None if a is None else (a.get() if _is_cupy(a) else np.asarray(a))
