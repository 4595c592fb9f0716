"""cupyconv: fast GPU convolution for CuPy arrays, without cuDNN.

Kernels are CUDA/HIP source strings compiled at first use (NVRTC on NVIDIA, HIPRTC on AMD ROCm)
and cached; importing the package compiles nothing and does not touch the GPU.
"""

# signal, ndimage: the SciPy-compatible APIs; cudnn: the removed cupy.cudnn convolutions;
# dask: the same on dask arrays (Dask itself is imported only when one of its functions runs)
from cupyconv import cudnn, dask, jit, ndimage, reference, signal
from cupyconv._core.caches import clear_caches
from cupyconv._core.geometry import ConvGeometry, output_shape
from cupyconv._core.version import __version__
from cupyconv._dispatch.tune import tune
from cupyconv.backward import conv_backward_data, conv_backward_weight, conv_transpose
from cupyconv.conv import conv, conv1d, conv2d, conv3d
from cupyconv.gemm import gemm
from cupyconv.im2col import col2im, im2col
from cupyconv.separable import separable_conv

__all__ = ["conv", "conv1d", "conv2d", "conv3d", "conv_backward_data", "conv_backward_weight",
           "conv_transpose", "separable_conv", "gemm", "im2col", "col2im", "output_shape",
           "ConvGeometry", "reference", "jit", "signal", "ndimage", "dask", "cudnn", "tune", "clear_caches",
           "__version__"]
