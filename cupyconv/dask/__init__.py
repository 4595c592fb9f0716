"""``cupyconv.ndimage`` filters and ``cupyconv.conv`` on Dask arrays (``pip install 'cupyconv[dask]'``).

Every function takes a ``dask.array.Array`` and returns one, lazily: nothing runs until
``.compute()``.  A filter is one graph layer with ONE task per output chunk (:func:`_halo_map`):
the task reads the chunk and the neighbours its halo reaches into (as deep as the filter reaches
on each side along each axis, from the filter size, sigma/truncate/radius and origin -- left and
right may differ), assembles the chunk with its halo in one allocation (:func:`assemble_halo`),
filters it and trims the halo off, so every output element is computed from the same inputs as in
one call on the whole array.  The semantics are ``dask.array.map_overlap``'s with boundary "none"
or "periodic" and ``trim=True``; its graph (a getitem per slab, a concatenate and a trim per chunk)
cost more in the scheduler than the filters take on a GPU.  With ``scipy.ndimage`` the result is
bit-identical except for the uniform filters (SciPy's running sum starts at each chunk); with
``cupyconv.ndimage`` a chunk may run another kernel than the whole array (fused or not, tiled or
direct), so results agree to rounding.

- At the array's edge there is no halo (``boundary="none"``): the chunk touches the edge, and the
  filter's own ``mode`` extends it exactly as it extends the whole array (an edge chunk's inward
  halo is then at least as deep as the mode reflects).  ``mode="wrap"`` (and ``"grid-wrap"``)
  read the far end of the axis, so those axes take their halo from there
  (``boundary="periodic"``).  An axis filtered with both wrap and another mode (possible with
  per-axis modes) is made one chunk.
- Chunks thinner than the halo are merged with their neighbours first (:func:`rechunk_for_depth`);
  an axis held in one chunk needs no halo at all.  Filters without any halo are a ``map_blocks``.
- Each chunk is dispatched on its array type (:func:`_backend`): CuPy chunks run
  ``cupyconv.ndimage``; NumPy chunks run ``scipy.ndimage``, a stand-in that needs no GPU (it lets
  the graph be built and checked on a CPU, and keeps NumPy-chunked arrays usable).

``signal_correlate`` / ``signal_convolve`` are ``cupyconv.signal.correlate`` / ``convolve`` (SciPy's
modes) of a dask ``in1`` with a small concrete ``in2``: ``in1`` is zero-padded as the mode needs and
each chunk is computed in 'valid' mode with a right halo, one task per chunk as for the filters
(:func:`_map_windows`).  NumPy chunks run ``scipy.signal``.

``conv`` maps ``cupyconv.conv`` over chunks of the batch axis where the spatial axes are single
chunks; spatially chunked inputs go through the same padded 'valid' windows as the signal functions
(chunk boundaries on multiples of the stride).  ``conv_transpose`` and ``separable_conv`` map over
batch chunks.  Weights are one key of the graph (a distributed scheduler sends them to each worker
once) and each worker copies them to a device once (:func:`_for_block`).  NumPy chunks run the
float64 ``cupyconv.reference`` functions, cast back to the input's dtype.  The backend of every
chunk is picked in one place, :func:`_backend`.

``gpu=True`` (every function): NumPy chunks are copied, with their halo, to the current GPU, run
there and copied back (:func:`_staged`) -- the out-of-core path for volumes in host memory or on
disk: each chunk is assembled with its halo on the host, so only the chunks in flight occupy the
GPU.

On a distributed cluster of two or more workers (its client the default scheduler when the
graph is built) a filter task takes its halo from its neighbours' face slabs, which each chunk
exports in one more task, so workers exchange slabs instead of whole chunks.  Where the input's
chunks are held by the cluster (persisted), the graph knows where each lives: a task reads whole
chunks from neighbours on its own worker and slabs from the others only, and runs where its
chunk is (:func:`halo_transfer`; the dask config key ``cupyconv.halo-transfer`` overrides the
choice).  :func:`distribute` persists an array in one box of neighbouring chunks per worker
(:func:`block_owners`), so only the slabs on the boxes' faces move.

``output`` may be None or a dtype (output arrays cannot be written chunk by chunk).  Tested: one
GPU with the synchronous and threaded schedulers, ``dask_cuda.LocalCUDACluster`` with one worker
on one GPU and one worker per GPU on two (placed and unplaced), a CPU ``distributed.LocalCluster``
of two workers (placement), and ``gpu=True`` on a memmap eight times CuPy's pool limit.

The files of this package, one concern each (every name above is importable from
``cupyconv.dask``): ``chunks.py`` (Dask imported on first use, the backend a chunk's array type
picks, ``gpu=True`` staging, weights held once per graph), ``halo.py`` (halo planning: reaches,
pieces, cuts, assembly), ``placement.py`` (placement on a cluster: owners, pins,
:func:`distribute`, slab export), ``graph.py`` (the one-task-per-chunk layers), ``ndimage.py``
(the filters), ``signal.py`` (``signal_correlate`` / ``signal_convolve``) and ``convolution.py``
(``conv``, ``conv_transpose``, ``separable_conv``).
"""

from cupyconv.dask.convolution import conv, conv_transpose, separable_conv
from cupyconv.dask.halo import (TRIM_VIEW_MAX_GROWTH, assemble_halo,  # noqa: F401 (as before)
                                filter_reach, rechunk_for_depth, window_chunks)
from cupyconv.dask.ndimage import (convolve, convolve1d, correlate, correlate1d, gaussian_filter,
                                   gaussian_filter1d, gaussian_gradient_magnitude,
                                   gaussian_laplace, laplace, prewitt, sobel, uniform_filter,
                                   uniform_filter1d)
from cupyconv.dask.placement import block_owners, chunk_owners, distribute, halo_transfer
from cupyconv.dask.signal import signal_convolve, signal_correlate

__all__ = ["correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "sobel", "prewitt",
           "laplace", "gaussian_laplace", "gaussian_gradient_magnitude", "signal_correlate",
           "signal_convolve", "conv", "conv_transpose", "separable_conv", "filter_reach",
           "rechunk_for_depth", "window_chunks", "distribute", "block_owners", "chunk_owners",
           "halo_transfer"]
