"""cupyconv: fast GPU convolution for CuPy arrays, without cuDNN.

Kernels are CUDA/HIP source strings compiled at first use (NVRTC on NVIDIA, HIPRTC on AMD ROCm)
and cached; importing the package compiles nothing and does not touch the GPU.
"""

from . import jit, reference
from ._geometry import ConvGeometry, output_shape
from .backward import conv_backward_data, conv_backward_weight, conv_transpose
from .conv import conv, conv1d, conv2d, conv3d
from .gemm import gemm
from .im2col import col2im, im2col
from .separable import separable_conv
from ._tune import tune
from . import signal  # SciPy-compatible signal API (cupyconv.signal)

__version__ = "0.1.0"

__all__ = ["conv", "conv1d", "conv2d", "conv3d", "conv_backward_data", "conv_backward_weight",
           "conv_transpose", "separable_conv", "gemm", "im2col", "col2im", "output_shape",
           "ConvGeometry", "reference", "jit", "signal", "tune", "__version__"]
