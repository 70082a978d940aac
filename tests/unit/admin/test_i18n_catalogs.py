"""The admin's catalogs: every language has every key, with the same placeholders; every
key the templates and scripts use exists; language negotiation picks what a browser asks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from omlx.server.admin import i18n

ADMIN = Path(i18n.__file__).parent
ENGLISH = i18n.catalog("en")


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_catalog_has_every_key_with_the_same_placeholders(lang: str) -> None:
    own = json.loads((i18n.CATALOG_DIR / f"{lang}.json").read_text(encoding="utf-8"))
    assert set(own) == set(ENGLISH), f"{lang}: missing {set(ENGLISH) - set(own)}"
    for key, text in ENGLISH.items():
        expected = set(i18n.PLACEHOLDER_RE.findall(text))
        assert set(i18n.PLACEHOLDER_RE.findall(own[key])) == expected, f"{lang}: {key}"
        assert own[key].strip(), f"{lang}: {key} is empty"


def test_no_stray_catalog_files() -> None:
    files = {p.stem for p in i18n.CATALOG_DIR.glob("*.json")}
    assert files == set(i18n.LANGUAGES)


def _used_keys() -> set[str]:
    """Keys named literally by the templates and scripts, and the dynamic `js.x.` families."""
    text = "".join(p.read_text() for p in (ADMIN / "templates").glob("*.jinja"))
    text += "".join(p.read_text() for p in (ADMIN / "static" / "js").glob("*.js"))
    found = re.findall(r"""\bt\(\s*["']([a-z0-9_]+\.[a-z0-9_.]+)["']""", text)
    return {k for k in found if not k.endswith((".", "_"))}  # families: the next test


def test_every_key_used_exists_in_english() -> None:
    used = _used_keys()
    assert len(used) > 150  # the pattern still finds the keys
    assert used - set(ENGLISH) == set()


@pytest.mark.parametrize(
    ("prefix", "suffixes"),
    [
        ("js.state.", ["loaded", "loading", "available"]),  # ModelStatus.state
        ("js.job.", ["running", "done", "failed"]),  # JobStatus.state
        ("js.source.", ["default", "file", "env", "cli"]),  # settings.Source
        ("js.phase.", ["resolving", "downloading", "converting", "linking", "done"]),
        ("js.cache.tier_", ["hot", "cold", "all"]),
        ("js.models.done_", ["load", "unload", "pin", "unpin", "ttl", "delete"]),
    ],
)
def test_dynamic_key_families_are_complete(prefix: str, suffixes: list[str]) -> None:
    for suffix in suffixes:
        assert prefix + suffix in ENGLISH


def test_missing_key_falls_back_to_english_never_to_the_key(monkeypatch) -> None:
    patched = {k: v for k, v in i18n.catalog("de").items() if k != "nav.logs"}
    monkeypatch.setattr(i18n, "catalog", lambda lang: patched if lang == "de" else ENGLISH)
    t = i18n.translator("de")
    assert t("nav.logs") == ENGLISH["nav.logs"]
    assert t("nav.models") == "Modelle"
    assert t("js.chat.ttft", ms=12) == "erstes Token 12 ms"


@pytest.mark.parametrize(
    ("cookie", "header", "expected"),
    [
        (None, "ja,en;q=0.8", "ja"),
        (None, "zh-TW,zh;q=0.9", "zh-TW"),
        (None, "zh-Hant-HK", "zh-TW"),
        (None, "zh-HK", "zh-TW"),
        (None, "zh", "zh-CN"),
        (None, "pt-PT", "pt-BR"),
        (None, "de-AT,de;q=0.9", "de"),
        (None, "nl,fr;q=0.5", "fr"),  # the first language the admin speaks
        (None, "fr;q=0.2,ko;q=0.9", "ko"),  # by quality, not order
        (None, "xx, yy", "en"),
        (None, None, "en"),
        ("ru", "ja", "ru"),  # the saved choice wins
        ("klingon", "es", "es"),  # a bad cookie is ignored
    ],
)
def test_negotiation(cookie: str | None, header: str | None, expected: str) -> None:
    assert i18n.negotiate(cookie, header) == expected


def test_js_strings_are_only_js_keys() -> None:
    strings = i18n.js_strings("ko")
    assert strings and all(k.startswith("js.") for k in strings)
    assert strings["js.conn.live"] == i18n.catalog("ko")["js.conn.live"]
