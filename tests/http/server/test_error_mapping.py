"""The one exception → response mapping, in both dialects (no server needed)."""

from __future__ import annotations

import json

import msgspec
import pytest
from litestar.exceptions import NotFoundException

from omlx.errors import (
    ContextTooLong,
    ImportFailed,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    Unauthorized,
)
from omlx.server.errors import Dialect, error_response


@pytest.mark.parametrize(
    ("exc", "openai_status", "anthropic_status", "anthropic_type"),
    [
        (InvalidRequest("bad"), 400, 400, "invalid_request_error"),
        (ContextTooLong("too long"), 400, 400, "invalid_request_error"),
        (Unauthorized("no key"), 401, 401, "authentication_error"),
        (ModelNotFound("nope"), 404, 404, "not_found_error"),
        (Overloaded("busy", retry_after_s=3), 503, 529, "overloaded_error"),
        (ImportFailed("weird"), 500, 500, "api_error"),
        (KeyError("x"), 500, 500, "api_error"),
        (NotFoundException(), 404, 404, "not_found_error"),
    ],
)
def test_statuses_and_shapes(exc, openai_status, anthropic_status, anthropic_type) -> None:
    o = error_response(exc, Dialect.OPENAI)
    assert o.status_code == openai_status
    assert set(o.content["error"]) == {"message", "type", "param", "code"}
    a = error_response(exc, Dialect.ANTHROPIC)
    assert a.status_code == anthropic_status
    assert a.content == {
        "type": "error",
        "error": {"type": anthropic_type, "message": a.content["error"]["message"]},
    }
    json.dumps(o.content)


def test_overloaded_sets_retry_after_in_both_dialects() -> None:
    for dialect in Dialect:
        r = error_response(Overloaded("busy", retry_after_s=4), dialect)
        assert r.headers["Retry-After"] == "4"


def test_validation_error_names_the_field() -> None:
    class Body(msgspec.Struct):
        max_tokens: int

    try:
        msgspec.json.decode(b'{"max_tokens": "x"}', type=Body)
    except msgspec.ValidationError as e:
        r = error_response(e, Dialect.OPENAI)
    assert r.status_code == 400
    assert r.content["error"]["param"] == "max_tokens"
