"""The CLI's error line stays one line whatever the console's width."""

from __future__ import annotations

import pytest
import typer

from omlx.cli import output


def test_an_error_naming_a_long_path_is_not_cut_at_80_columns(capsys, monkeypatch):
    monkeypatch.setattr(output, "err_console", output.Console(stderr=True, width=80))
    path = "/tmp/" + "a-very-long-folder-name/" * 6 + "prompts.jsonl"
    with pytest.raises(typer.Exit) as exit_:
        output.fail(f"cannot read prompts file {path}: No such file or directory")
    assert exit_.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path in err, err
