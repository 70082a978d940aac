"""The parsers are pure Python: they import with MLX made unimportable."""

from __future__ import annotations

import subprocess
import sys


def test_parsers_import_without_mlx() -> None:
    code = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx_lm'] = None\n"
        "import omlx.engine.text.parsers as p\n"
        "d = p.make_output_parser(chat_template='<think>', model_type=None,"
        " tools_enabled=True, thinking=None)\n"
        "assert d.feed('<think>a</think>b').content == 'b'\n"
        "assert not any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules"
        " if sys.modules[m] is not None)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
