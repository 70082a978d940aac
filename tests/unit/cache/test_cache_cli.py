"""`omlx cache inspect|clear` without a server: reading and clearing the cold directory."""

from __future__ import annotations

import socket
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from omlx.cache.chain_hash import BlockKey
from omlx.cache.cold_format import block_path
from omlx.cache.cold_store import write_block
from omlx.cli.main import app
from omlx.schemas.cache import CacheReport
from tests.unit.cache.test_cache_cold_tier import KEYS, make_block


@pytest.fixture
def cold_dir(_isolated_omlx_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    with socket.socket() as s:  # a port nobody listens on: no server answers
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OMLX_SERVER__PORT", str(port))
    monkeypatch.setenv("OMLX_CACHE__BLOCK_SIZE", "4")
    root = _isolated_omlx_home / "cache"
    for i in range(3):
        write_block(root, make_block(i), 4)
    other = make_block(3)
    other.info = type(other.info)(BlockKey(KEYS[3]), "fp-other", 0, 4, 10, model_name="other")
    write_block(root, other, 4)
    (root / KEYS[5][:2]).mkdir(exist_ok=True)
    (root / KEYS[5][:2] / f"{KEYS[5]}.safetensors").write_bytes(b"garbage")
    return root


def test_inspect_json_reads_the_cold_dir(cold_dir: Path) -> None:
    result = CliRunner().invoke(app, ["cache", "inspect", "--json"])
    assert result.exit_code == 0, result.output
    report = msgspec.json.decode(result.stdout, type=CacheReport)
    assert (report.source, report.block_size, report.skipped_files) == ("disk", 4, 1)
    by_name = {m.model: m for m in report.models}
    assert sorted(by_name) == ["other", "tiny"]
    tiny = by_name["tiny"]
    assert (tiny.cold.blocks, tiny.cold.tokens, tiny.hot.blocks) == (3, 12, 0)
    assert tiny.cold.bytes == sum(block_path(cold_dir, KEYS[i]).stat().st_size for i in range(3))
    assert tiny.cold.oldest is not None and tiny.cold.oldest <= tiny.cold.newest

    result = CliRunner().invoke(app, ["cache", "inspect", "--model", "other", "--json"])
    assert [m.model for m in msgspec.json.decode(result.stdout, type=CacheReport).models] == [
        "other"
    ]
    table = CliRunner().invoke(app, ["cache", "inspect"])
    assert table.exit_code == 0 and "tiny" in table.stdout and "skipped files: 1" in table.stdout


def test_clear_by_model_and_tier(cold_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["cache", "clear", "--tier", "hot"])
    assert result.exit_code == 0 and "nothing to clear" in result.stdout
    result = runner.invoke(app, ["cache", "clear", "--model", "tiny"])
    assert result.exit_code == 0 and "removed 3" in result.stdout
    names = {
        m.model
        for m in msgspec.json.decode(
            runner.invoke(app, ["cache", "inspect", "--json"]).stdout, type=CacheReport
        ).models
    }
    assert names == {"other"}
    assert runner.invoke(app, ["cache", "clear"]).stdout.strip() == "removed 1 cold block files"
    assert runner.invoke(app, ["cache", "clear", "--tier", "warm"]).exit_code == 1
