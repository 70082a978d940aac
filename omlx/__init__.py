"""omlx: an LLM inference server and CLI toolchain built on MLX."""

__version__ = "0.1.0"
