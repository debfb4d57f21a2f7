"""The kit's error response: every non-2xx answer of every service carries an `ErrorBody`."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from corrgrpo_proto import ErrorBody
from corrgrpo_proto.common import ErrorDetail

from .text import valid_text


def error_response(
    status: int, error: str, message: str, details: list[ErrorDetail] | None = None
) -> JSONResponse:
    """Messages and paths may quote the request or a candidate (an argument's name, an exception): made
    encodable."""
    details = [ErrorDetail(loc=valid_text(d.loc), message=valid_text(d.message)) for d in details or []]
    body = ErrorBody(error=error, message=valid_text(message), details=details)
    return JSONResponse(body.model_dump(), status_code=status)
