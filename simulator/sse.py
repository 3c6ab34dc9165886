"""Shared response helpers: SSE framing and SGLang's error envelopes."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache"}


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def event(obj: Any) -> bytes:
    """One SSE event: a single ``data:`` line and a blank line (SGLang sends nothing else)."""
    return f"data: {dumps(obj)}\n\n".encode()


def phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def native_error(status: int, message: str) -> JSONResponse:
    """A native-route failure: 400 uses {"error": {"message"}}; other statuses the legacy envelope."""
    if status == 400:
        return JSONResponse({"error": {"message": message}}, status_code=400)
    return JSONResponse(openai_error_body(status, message), status_code=status)


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    kind = {400: "BadRequest", 500: "InternalServerError"}.get(status, phrase(status))
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def openai_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(openai_error_body(status, message), status_code=status)


def native_stream_error(status: int, message: str) -> bytes:
    kind = "invalid_request_error" if status == 400 else phrase(status).lower().replace(" ", "_")
    return event({"error": {"message": message, "type": kind, "code": status, "retryable": status >= 500}})


def openai_stream_error(status: int, message: str) -> bytes:
    kind = "BadRequestError" if status == 400 else phrase(status).upper().replace(" ", "_")
    return event({"error": {"object": "error", "message": message, "type": kind, "param": None, "code": status}})
