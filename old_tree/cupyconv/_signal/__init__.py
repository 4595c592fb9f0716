"""Signal-filter kernel family: SciPy-semantics filter plans, the direct filter kernels and the FFT
path (sources in ``kernel_src/signal``)."""
