"""The model store: model folders and their types, GGUF import, hub download, the default model.

No MLX and no engine: `omlx pull` and `omlx models` run on this package alone.
"""
