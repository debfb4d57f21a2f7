"""The kit's error response: every non-2xx answer of every service carries an `ErrorBody`."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from corrgrpo_proto import ErrorBody
from corrgrpo_proto.common import ErrorDetail


def error_response(status: int, error: str, message: str, details: list[ErrorDetail] | None = None) -> JSONResponse:
    body = ErrorBody(error=error, message=message, details=details or [])
    return JSONResponse(body.model_dump(), status_code=status)
