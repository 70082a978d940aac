"""HTTP-layer tests: the real app on a loopback server over a scripted ModelPool (no MLX)."""
