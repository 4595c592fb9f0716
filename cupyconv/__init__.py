"""cupyconv: fast GPU convolution for CuPy, without cuDNN."""
