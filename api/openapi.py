"""The OpenAPI 3.1 description of the public API, served at /v1/openapi.json."""

from django.http import HttpRequest, JsonResponse

from config.http import OPENAI, speaks

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant"]},
        "content": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "text"],
                        "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                    },
                },
            ]
        },
    },
}
REQUEST = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "description": "An id from GET /v1/models."},
        "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
        "stream": {"type": "boolean", "default": False},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "max_tokens": {"type": "integer", "minimum": 1, "description": "At most the plan's output limit."},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "stop": {"oneOf": [{"type": "string"}, {"type": "array", "maxItems": 4, "items": {"type": "string"}}]},
        "seed": {"type": "integer", "minimum": 0},
        "n": {"const": 1},
        "user": {"type": "string"},
    },
}
USAGE = {
    "type": "object",
    "properties": {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
        "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": {"type": "integer"}}},
    },
}
COMPLETION = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "chat.completion"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "usage": USAGE,
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "finish_reason": {"enum": ["stop", "length"]},
                    "message": {
                        "type": "object",
                        "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}},
                    },
                },
            },
        },
    },
}
MODEL = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
        "context_window": {
            "type": "integer",
            "description": "Tokens one request (prompt and answer) may hold on this model under your plan: "
            "the smaller of the plan's window and the model's.",
        },
    },
}


def _errors(*statuses: int) -> dict:
    meaning = {
        400: "Bad request: the message says what is wrong",
        401: "Missing, unknown, revoked or expired key",
        403: "The plan does not allow this (model, API keys), or the account is suspended "
        "(code account_suspended; the message gives the reason)",
        404: "No such model",
        429: "Rate limit or monthly quota reached; see Retry-After",
        503: "Busy: try again after Retry-After seconds",
    }
    return {str(s): {"description": meaning[s], "content": {"application/json": {"schema": ERROR}}} for s in statuses}


RESPONSE = {
    "type": "object",
    "required": ["id", "object", "created_at", "status", "model", "output"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "response"},
        "created_at": {"type": "integer"},
        "status": {"enum": ["completed", "incomplete", "failed", "in_progress"]},
        "model": {"type": "string"},
        "output": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": ["object", "null"]},
        "incomplete_details": {"type": ["object", "null"]},
        "previous_response_id": {"type": ["string", "null"]},
    },
}
DOCUMENT = {
    "openapi": "3.1.0",
    "info": {
        "title": "SGLChat API",
        "version": "1",
        "description": "OpenAI-compatible chat completions. Authenticate with 'Authorization: Bearer <API key>'.",
    },
    "servers": [{"url": "/v1"}],
    "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "security": [{"bearer": []}],
    "paths": {
        "/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "requestBody": {"required": True, "content": {"application/json": {"schema": REQUEST}}},
                "responses": {
                    "200": {
                        "description": "A completion, or with stream=true a text/event-stream of chunks ending in "
                        "'data: [DONE]'",
                        "content": {
                            "application/json": {"schema": COMPLETION},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors(400, 401, 403, 404, 429, 503),
                },
            }
        },
        "/responses": {
            "post": {
                "operationId": "createResponse",
                "description": "OpenAI's Responses API over the same path as chat completions (docs/api.md says "
                "what is supported). Text input items, function tools and text.format; stored unless store=false.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object", "required": ["model", "input"]}}},
                },
                "responses": {
                    "200": {
                        "description": "A response object, or with stream=true a text/event-stream of "
                        "'event: response.*' frames ending in response.completed, response.incomplete or "
                        "response.failed",
                        "content": {
                            "application/json": {"schema": RESPONSE},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors(400, 401, 403, 404, 429, 503),
                },
            }
        },
        "/responses/{response_id}": {
            "parameters": [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {
                "operationId": "retrieveResponse",
                "responses": {
                    "200": {"description": "A stored response", "content": {"application/json": {"schema": RESPONSE}}},
                    **_errors(401, 404),
                },
            },
            "delete": {
                "operationId": "deleteResponse",
                "responses": {
                    "200": {"description": "The response was deleted"},
                    **_errors(401, 404),
                },
            },
        },
        "/models": {
            "get": {
                "operationId": "listModels",
                "responses": {
                    "200": {
                        "description": "The models the key's plan allows",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "object": {"const": "list"},
                                        "data": {"type": "array", "items": MODEL},
                                    },
                                }
                            }
                        },
                    },
                    **_errors(401, 403),
                },
            }
        },
        "/models/{model_id}": {
            "get": {
                "operationId": "retrieveModel",
                "parameters": [{"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "The model", "content": {"application/json": {"schema": MODEL}}},
                    **_errors(401, 403, 404),
                },
            }
        },
    },
}


@speaks(OPENAI)
def openapi_document(request: HttpRequest) -> JsonResponse:
    return JsonResponse(DOCUMENT)
