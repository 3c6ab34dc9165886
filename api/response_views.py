"""The Responses API endpoints (`/v1/responses`). Thin: the request is translated into a chat
completion (`api.responses_api`), admitted, run and billed by the same driver as `/v1/chat/completions`,
and its deltas rendered as Responses items and events. A response is stored for the key's owner
unless the request says `store: false`, so that it can be read back and continued from."""

from __future__ import annotations

import time

from channels.db import database_sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.models import ApiKey
from api import answering, completions, responses_api, selectors, services
from api.responses_api import Output, ResponseNotFound, ResponsesRequest
from chat.generation import run
from chat.generation.completion import Completion
from chat.generation.settle import BLOCKED, Ending
from chat.suspension import AccountWatch
from config.http import OPENAI, client_ip, refusal_response, speaks
from config.refusals import NotFound, Refusal


def _begin(request: HttpRequest, key: ApiKey, body: object) -> tuple[ResponsesRequest, list[dict], run.Generation]:
    """Read the request, find the conversation it continues, and start it (one worker-thread hop)."""
    ask = responses_api.read(body)
    earlier: list[dict] = []
    if ask.previous_response_id is not None:
        stored = selectors.stored_response(key.user, ask.previous_response_id)
        if stored is None:
            raise ResponseNotFound(
                f"Previous response with id '{ask.previous_response_id[:100]}' not found.",
                param="previous_response_id",
            )
        earlier = responses_api.conversation(stored.messages, stored.body.get("output", []))
    chat = responses_api.chat_request(ask, earlier)
    try:
        generation = completions.start(
            key,
            chat,
            client_ip(request),
            request.headers.get("X-Conversation-Key") or None,
            # `store: false` asks that nothing of the response be kept: not in the response cache either.
            request.headers.get("Cache-Control", "") if ask.store else "no-store",
        )
    except Refusal as refusal:
        raise responses_api.renamed(refusal) from None
    return ask, earlier, generation


def _ended(ending: Ending, completion: Completion) -> tuple[str, str | None]:
    """The response's status and, when incomplete, why."""
    finish = answering.finish_reason_of(ending, completion.choices.get(0))
    if finish == "content_filter":
        return "incomplete", "content_filter"
    if finish == "length":
        return "incomplete", "max_output_tokens"
    return "completed", None


def _error(refusal: Refusal) -> dict:
    """A failure mid-stream, as the failed response's `error`."""
    code = {429: "rate_limit_exceeded", 400: "invalid_prompt"}.get(refusal.status, "server_error")
    return {"code": code, "message": refusal.message}


@csrf_exempt
@speaks(OPENAI)
async def create_response(request: HttpRequest):
    try:
        # The key before the body: without a valid one, nothing is parsed.
        key = request.api_key = await answering.authenticate(request)
        ask, earlier, generation = await database_sync_to_async(_begin)(request, key, answering.read_body(request))
        request.billing_period = generation.turn.billing
    except Refusal as refusal:
        return refusal_response(request, refusal)

    opened = await answering.open_completion(request, generation)
    if isinstance(opened, HttpResponse):
        return opened
    completion, first, watch = opened.completion, opened.first, opened.watch
    answer = _Answer(ask, earlier, generation, completion, watch)
    if ask.stream:
        response = answering.event_stream(answer.events(first))
    else:
        response = await answer.whole(request, first)
    response["x-cache"] = answering.cache_status(generation)
    return response


class _Answer:
    """One response being written: its items as they come, then its final object (stored)."""

    def __init__(
        self,
        ask: ResponsesRequest,
        earlier: list[dict],
        generation: run.Generation,
        completion: Completion,
        watch: AccountWatch,
    ) -> None:
        self.ask = ask
        self.earlier = earlier
        self.generation = generation
        self.completion = completion
        self.watch = watch
        self.id = f"resp_{generation.job.rid}"
        self.created_at = int(time.time())
        self.output = Output(generation.job.rid)

    def _object(self, status: str, **fields) -> dict:
        return responses_api.response_object(
            self.ask,
            response_id=self.id,
            model=self.generation.job.model,
            created_at=self.created_at,
            status=status,
            output=self.output.items,
            **fields,
        )

    async def _settled(self, ending: Ending) -> tuple[list[dict], dict]:
        """The events that complete the output, and the final response object (stored if asked)."""
        status, reason = _ended(ending, self.completion)
        events = self.output.finish(status, withheld=ending.status == BLOCKED)
        body = self._object(status, usage=responses_api.usage_body(ending.usage), incomplete_reason=reason)
        if self.ask.store:
            await database_sync_to_async(services.store_response)(
                self.generation.turn.user,
                response_id=self.id,
                model=self.generation.job.model,
                messages=[*self.earlier, *self.ask.messages],
                body=body,
            )
        return events, body

    async def whole(self, request: HttpRequest, first: list | Ending) -> HttpResponse:
        item = first
        try:
            while not isinstance(item, Ending):
                for piece in item:
                    if piece.index == 0:
                        self.output.add(piece)
                item = await self.completion.next_pieces()
        except BaseException:
            self.generation.stop.set()  # the program left: the driver aborts and bills what was written
            raise
        finally:
            self.watch.stop()
        refusal = self.watch.refusal or answering.failure_of(item)
        if refusal is not None:
            return refusal_response(request, refusal)
        _, body = await self._settled(item)
        return JsonResponse(body)

    async def events(self, first: list | Ending):
        """Responses' event stream: created, in progress, each item's events, then the end."""
        sequence = 0

        def frame(event: dict) -> bytes:
            nonlocal sequence
            event["sequence_number"] = sequence
            sequence += 1
            return responses_api.sse(event)

        try:
            yield frame({"type": "response.created", "response": self._object("in_progress")})
            yield frame({"type": "response.in_progress", "response": self._object("in_progress")})
            item = first
            while not isinstance(item, Ending):
                for piece in item:
                    if piece.index == 0:
                        for event in self.output.add(piece):
                            yield frame(event)
                item = await self.completion.next_pieces()
            refusal = self.watch.refusal or answering.failure_of(item)
            if refusal is not None:
                for event in self.output.finish("failed"):
                    yield frame(event)
                failed = self._object("failed", usage=responses_api.usage_body(item.usage), error=_error(refusal))
                yield frame({"type": "response.failed", "response": failed})
                return
            events, body = await self._settled(item)
            for event in events:
                yield frame(event)
            kind = "response.completed" if body["status"] == "completed" else "response.incomplete"
            yield frame({"type": kind, "response": body})
        finally:
            # The program may have left mid-stream: stopping aborts the engine request; the driver bills.
            self.generation.stop.set()
            self.watch.stop()


def _stored_or_404(authorization: str, response_id: str):
    key = completions.authenticate(authorization)
    stored = selectors.stored_response(key.user, response_id)
    if stored is None:
        raise NotFound(f"Response with id '{response_id[:100]}' not found.", param="response_id")
    return key, stored


@csrf_exempt
@speaks(OPENAI)
def response_item(request: HttpRequest, response_id: str) -> JsonResponse:
    """GET a stored response, or DELETE it (its owner's keys only)."""
    try:
        key, stored = _stored_or_404(request.headers.get("Authorization", ""), response_id)
    except Refusal as refusal:
        return refusal_response(request, refusal)
    if request.method == "GET":
        return JsonResponse(stored.body)
    services.delete_response(key.user, response_id)
    return JsonResponse({"id": response_id, "object": "response", "deleted": True})
