"""HTTP load generator for OpenAI-compatible servers (omlx itself, mlx_lm.server, ...)."""
