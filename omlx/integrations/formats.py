"""Round-trip edits of TOML (tomlkit) and YAML (ruamel.yaml) configs.

Both libraries keep comments, key order and layout of everything not touched, so a
merge changes only the keys omlx owns. A value equal to what is there already is left
alone, which makes a second launch a no-op.
"""

from __future__ import annotations

import io
from typing import Any

import tomlkit
import tomlkit.exceptions
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from omlx.integrations.files import ConfigError

Updates = dict[tuple[str, ...], Any]


def _toml_value(value: Any) -> Any:
    if isinstance(value, dict):
        table = tomlkit.table()
        for k, v in value.items():
            table[k] = _toml_value(v)
        return table
    return value


def toml_loads(text: str, where: str) -> Any:
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.TOMLKitError as e:
        raise ConfigError(f"{where}: not valid TOML ({e}); left untouched") from None


def toml_set(text: str | None, where: str, updates: Updates) -> str:
    """`text` with each dotted path set; tables are created as `[a.b]` sections."""
    doc = toml_loads(text or "", where)
    for path, value in updates.items():
        node: Any = doc
        for i, key in enumerate(path[:-1]):
            child = node.get(key)
            if child is None:
                child = tomlkit.table(is_super_table=True)
                node[key] = child
                child = node[key]
            elif not isinstance(child, dict):
                raise ConfigError(
                    f"{where}: {'.'.join(path[: i + 1])} is not a table; left untouched"
                )
            node = child
        last = path[-1]
        current = node.get(last)
        plain = current.unwrap() if hasattr(current, "unwrap") else current
        if plain != value:
            node[last] = _toml_value(value)
    out = tomlkit.dumps(doc)
    return text if text is not None and out == text else out


def _yaml() -> YAML:
    yaml = YAML()  # round-trip mode: comments and order survive
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def yaml_loads(text: str, where: str) -> Any:
    try:
        data = _yaml().load(text)
    except YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({e}); left untouched") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level is not a mapping; left untouched")
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def yaml_set(text: str | None, where: str, updates: Updates) -> str:
    from ruamel.yaml.comments import CommentedMap

    data = yaml_loads(text or "", where)
    if data is None:
        data = CommentedMap()
    changed = False
    for path, value in updates.items():
        node = data
        for i, key in enumerate(path[:-1]):
            child = node.get(key)
            if child is None:
                child = CommentedMap()
                node[key] = child
            elif not isinstance(child, dict):
                raise ConfigError(
                    f"{where}: {'.'.join(path[: i + 1])} is not a mapping; left untouched"
                )
            node = child
        if _plain(node.get(path[-1])) != value:
            node[path[-1]] = value
            changed = True
    if not changed and text is not None:
        return text
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()
