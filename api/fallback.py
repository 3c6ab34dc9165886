"""What `/v1` answers for a path it does not serve: OpenAI's 404 in OpenAI's words ("Invalid URL (POST
/v1/nope)"), so an SDK raises NotFoundError rather than failing to read an HTML page. Routed last in
api/urls.py, so it also makes every `/v1` path one that speaks OpenAI's errors (config.http)."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from config.http import OPENAI, refusal_response, speaks
from config.refusals import NotFound
from config.text import shortened


@csrf_exempt
@speaks(OPENAI)
def unknown_endpoint(request: HttpRequest) -> HttpResponse:
    return refusal_response(
        request,
        NotFound(
            f"Invalid URL ({request.method} {shortened(request.path)}): this API has no such endpoint. "
            "GET /v1/openapi.json lists the ones it has."
        ),
    )
