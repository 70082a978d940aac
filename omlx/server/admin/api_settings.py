"""The settings page's API: every key with its meaning, value and source; validated edits.

Edits go through `omlx.settings.set_value`, the function behind `omlx config set`, so the
page accepts and refuses exactly what the command does, and writes the same config.toml.
A few keys apply at once (LIVE_KEYS); the rest at the next start, which the page says.
Secrets are write-only: a row says whether one is set, never what it is.
"""

from __future__ import annotations

import logging
import typing
from typing import Annotated, Any

import msgspec
from litestar import Request, get, post, put
from litestar.params import Body

from omlx.errors import InvalidRequest, OmlxError
from omlx.schemas.admin import PasswordUpdate, SettingRow, SettingsView, SettingUpdate
from omlx.server.admin.core import Admin, admin_guard, admin_of
from omlx.server.admin.credentials import MIN_PASSWORD_CHARS, hash_password
from omlx.settings import (
    SECRET_KEYS,
    SettingsError,
    all_keys,
    description,
    env_var,
    field_type,
    flatten,
    read_file,
    set_value,
    write_file,
)

log = logging.getLogger(__name__)

# Keys whose new value the running server takes at once.
LIVE_KEYS = frozenset(
    {"log.level", "models.ttl_s", "models.ttl_overrides_s", "models.pinned",
     "admin.session_idle_s", "admin.password_hash"}
)  # fmt: skip


def _kind(t: Any) -> tuple[str, list[str] | None]:
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return _kind(typing.get_args(t)[0])
    if origin is typing.Literal:
        return "choice", [str(a) for a in typing.get_args(t)]
    if origin is list:
        return "list", None
    if origin is dict:
        return "dict", None
    if isinstance(t, type) and t.__name__ in ("bool", "int", "float", "str"):
        return t.__name__, None
    return "str", None


def _file_values(admin: Admin) -> dict[str, Any]:
    try:
        data = read_file(admin.config_file)
    except SettingsError:
        return {}
    return {f"{s}.{k}": v for s, values in data.items() for k, v in values.items()}


def rows(admin: Admin) -> list[SettingRow]:
    running = flatten(admin.settings) | admin.live
    in_file = _file_values(admin)
    out = []
    for key in all_keys():
        kind, choices = _kind(field_type(key))
        secret = key in SECRET_KEYS
        source = admin.options.sources.get(key, "default")
        if key in admin.live:
            source = "file"
        file_value = in_file.get(key)
        pending = key in in_file and file_value != running[key] and source in ("default", "file")
        out.append(
            SettingRow(
                key=key,
                section=key.split(".", 1)[0],
                description=description(key),
                kind=kind,
                choices=choices,
                value=None if secret else running[key],
                is_secret=secret,
                is_set=bool(running[key]) if secret else True,
                source=source,
                env_var=env_var(key),
                live=key in LIVE_KEYS,
                pending_restart=pending and key not in LIVE_KEYS,
                file_value=None if secret else file_value,
            )
        )
    return out


@get("/admin/api/settings", guards=[admin_guard])
async def settings_view(request: Request[Any, Any, Any]) -> SettingsView:
    admin = admin_of(request)
    return SettingsView(config_file=str(admin.config_file), rows=rows(admin))


@put("/admin/api/settings", guards=[admin_guard])
async def settings_update(
    request: Request[Any, Any, Any], data: Annotated[SettingUpdate, Body()]
) -> SettingRow:
    admin = admin_of(request)
    if data.key == "admin.password_hash":
        raise InvalidRequest("set the admin password with its own form", param=data.key)
    try:
        value = set_value(data.key, data.value, admin.config_file)
    except SettingsError as e:
        message = str(e)
        if data.key in SECRET_KEYS:  # the message quotes the value: never send a secret back
            message = f"bad value for {data.key}"
        raise InvalidRequest(message, param=data.key) from None
    log.info("admin: %s set in %s", data.key, admin.config_file)
    if data.key in LIVE_KEYS:
        try:
            await apply_live(admin, data.key, value)
        except OmlxError as e:  # saved, but the running pool refused it (an unknown model)
            message = f"saved, but not applied now: {e.message}"
            raise InvalidRequest(message, param=data.key) from None
    return next(r for r in rows(admin) if r.key == data.key)


@post("/admin/api/settings/password", guards=[admin_guard], status_code=200)
async def password_update(
    request: Request[Any, Any, Any], data: Annotated[PasswordUpdate, Body()]
) -> SettingRow:
    """Hash and store the admin password (empty: remove it)."""
    admin = admin_of(request)
    if data.password and len(data.password) < MIN_PASSWORD_CHARS:
        raise InvalidRequest(
            f"the admin password needs at least {MIN_PASSWORD_CHARS} characters",
            param="password",
        )
    stored = hash_password(data.password) if data.password else ""
    try:
        file_data = read_file(admin.config_file)
    except SettingsError as e:
        raise InvalidRequest(str(e)) from None
    section = file_data.setdefault("admin", {})
    if stored:
        section["password_hash"] = stored
    else:
        section.pop("password_hash", None)
    write_file(admin.config_file, file_data)
    log.info("admin: password %s", "set" if stored else "removed")
    await apply_live(admin, "admin.password_hash", stored)
    return next(r for r in rows(admin) if r.key == "admin.password_hash")


async def apply_live(admin: Admin, key: str, value: Any) -> None:
    """Make the running server use `value` for a LIVE_KEYS key."""
    if key == "log.level":
        logging.getLogger().setLevel(value)
    elif key == "admin.session_idle_s":
        admin.sessions.idle_s = float(value)
    elif key == "models.ttl_s":
        await admin.pool.set_ttl(None, float(value))
    elif key == "models.ttl_overrides_s":
        before = admin.live.get(key, admin.settings.models.ttl_overrides_s)
        for name in set(before) - set(value):
            await admin.pool.set_ttl(name, None)
        for name, ttl in value.items():
            await admin.pool.set_ttl(name, float(ttl))
    elif key == "models.pinned":
        before = set(admin.live.get(key, admin.settings.models.pinned))
        for name in before - set(value):
            await admin.pool.unpin(name)
        for name in set(value) - before:
            await admin.pool.pin(name)
    admin.live[key] = msgspec.to_builtins(value)


ROUTES = [settings_view, settings_update, password_update]
