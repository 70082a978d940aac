"""What the host gives omlx: the BLAS library and its thread count, weight layout for the CPU."""
