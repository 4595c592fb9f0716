"""Direct convolution kernel family: one output per thread, every option; the GPU reference
(sources in ``kernel_src/direct``)."""
