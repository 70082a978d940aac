"""One error tree for the whole project; the server maps codes to HTTP statuses."""

from __future__ import annotations


class OmlxError(Exception):
    """Base of every error omlx raises on purpose."""

    code = "internal_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(OmlxError):
    code = "invalid_request"


class ContextTooLong(InvalidRequest):
    code = "context_length_exceeded"


class Unauthorized(OmlxError):
    code = "invalid_api_key"


class Forbidden(OmlxError):
    """The request comes from a host name or a web page this server does not answer."""

    code = "forbidden"


class HostNotAllowed(Forbidden):
    code = "host_not_allowed"


class OriginNotAllowed(Forbidden):
    code = "origin_not_allowed"


class UnsupportedMediaType(OmlxError):
    """A JSON endpoint was sent a body that does not say it is JSON."""

    code = "unsupported_media_type"


class NotFound(OmlxError):
    """A named thing (model, stored response, ...) does not exist."""

    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class Overloaded(OmlxError):
    """Queue full or memory budget exhausted: the client should retry later."""

    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NotAvailableYet(OmlxError):
    code = "not_available"


class MissingExtra(OmlxError):
    """A model needs an optional part of omlx that this install lacks (`pip install
    'omlx[vlm]'`, say): the message names what to install."""

    code = "missing_extra"


class ImportFailed(OmlxError):
    """A model could not be imported (unsupported architecture, quant type, bad file)."""

    code = "import_failed"


class DraftMismatch(InvalidRequest):
    """A DFlash draft checkpoint does not fit its target (hidden size, vocabulary, layers)."""

    code = "draft_mismatch"


class ModelTooLarge(InvalidRequest):
    """A model bigger than the whole memory budget: no retry can help, unlike Overloaded."""

    code = "model_too_large"
