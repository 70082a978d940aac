"""The admin's languages: one flat JSON catalog per language, English as the fallback.

A key missing from a catalog falls back to English, never to the key itself; English has
every key (tests/unit/server/admin/test_i18n_catalogs.py checks all catalogs). Placeholders
are `{name}`. The language comes from the `omlx_lang` cookie, else the first
`Accept-Language` entry the admin speaks, else English.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

CATALOG_DIR = Path(__file__).parent / "catalogs"
LANG_COOKIE = "omlx_lang"
DEFAULT_LANG = "en"
# Order shown in the language menu; the name is how a speaker writes it.
LANGUAGES: dict[str, str] = {
    "en": "English",
    "zh-CN": "简体中文",
    "zh-TW": "繁體中文",
    "ja": "日本語",
    "ko": "한국어",
    "es": "Español",
    "fr": "Français",
    "de": "Deutsch",
    "pt-BR": "Português (Brasil)",
    "ru": "Русский",
}
# Tags whose region or script picks the catalog (zh-HK reads Traditional, zh-SG Simplified).
ALIASES = {
    "zh": "zh-CN", "zh-hans": "zh-CN", "zh-sg": "zh-CN", "zh-cn": "zh-CN",
    "zh-hant": "zh-TW", "zh-hk": "zh-TW", "zh-mo": "zh-TW", "zh-tw": "zh-TW",
    "pt": "pt-BR", "pt-br": "pt-BR", "pt-pt": "pt-BR",
}  # fmt: skip
PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")
# Keys the browser needs (messages built in JavaScript) start with this.
JS_PREFIX = "js."


@functools.cache
def catalog(lang: str) -> dict[str, str]:
    return json.loads((CATALOG_DIR / f"{lang}.json").read_text(encoding="utf-8"))


def translator(lang: str) -> Callable[..., str]:
    """t(key, **values): the text in `lang`, else English; placeholders filled in."""
    own, english = catalog(lang), catalog(DEFAULT_LANG)

    def t(key: str, **values: object) -> str:
        text = own.get(key) or english[key]
        return PLACEHOLDER_RE.sub(lambda m: str(values.get(m[1], m[0])), text) if values else text

    return t


def js_strings(lang: str) -> dict[str, str]:
    """The `js.*` strings of `lang`, English where it has none."""
    own, english = catalog(lang), catalog(DEFAULT_LANG)
    return {k: own.get(k) or v for k, v in english.items() if k.startswith(JS_PREFIX)}


def match(tag: str) -> str | None:
    """The catalog for one language tag, or None."""
    lowered = tag.strip().lower().replace("_", "-")
    if lowered in ALIASES:
        return ALIASES[lowered]
    for lang in LANGUAGES:
        if lang.lower() == lowered:
            return lang
    primary = lowered.split("-", 1)[0]
    if primary in ALIASES:
        # zh-Hant-TW and the like: the script subtag decides.
        return "zh-TW" if "hant" in lowered.split("-") else ALIASES[primary]
    return primary if primary in LANGUAGES else None


def negotiate(cookie: str | None, accept_language: str | None) -> str:
    if cookie and cookie in LANGUAGES:
        return cookie
    entries: list[tuple[float, int, str]] = []
    for i, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        if tag.strip() and q > 0:
            entries.append((-q, i, tag))
    for _, _, tag in sorted(entries):
        found = match(tag)
        if found:
            return found
    return DEFAULT_LANG
