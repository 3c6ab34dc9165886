"""An evaluation run, item by item (a Celery job: evals.tasks).

Each item in turn is sent to the version the run names through the product's own path of one answer
(`chat.generation.completion.start_evaluation`: admitted at the lowest priority, so it never takes a
place a person's request could have; when the engines are too busy for it, it waits and tries again),
scored (evals.scoring; a judge item asks the judge model the same way), and kept with its tokens and
latency; the run's progress is written with each item's result. One item at a time: a run is a light,
steady load beside people's requests, never a burst.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass

from celery import shared_task
from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from jsonschema.exceptions import SchemaError

from chat.generation import completion, engine, run
from chat.generation.settle import COMPLETED, Ending
from config import metrics, redis
from config.refusals import Busy, Refusal
from documents.embedding import aembed_texts
from evals import scoring
from evals.models import EvalItem, EvalResult, EvalRun
from inference.errors import EngineError
from inference.routing import NoNodeAvailable

log = logging.getLogger(__name__)

#: The longest answer an item may get, and the judge's reply.
ANSWER_TOKENS = 512
JUDGE_TOKENS = 96
#: How long an item waits, in all, for engines busy with people's requests before it is failed.
BUSY_PATIENCE_SECONDS = 600.0
#: A running run whose worker has kept no result for this long is taken to have lost it (an item, with its
#: judge, can take twice BUSY_PATIENCE_SECONDS): the task delivered again goes on with it.
STALE_SECONDS = 2 * BUSY_PATIENCE_SECONDS + 300


@dataclass
class _Asked:
    """One generation of a run: what came back, and how long it took."""

    ending: Ending
    latency_ms: int


async def _ask(
    evaluation: EvalRun, model: str, messages: list[dict], max_tokens: int, node_group: str | None
) -> _Asked:
    """One generation of `model` on the version `node_group` (None: wherever the model's traffic goes),
    waiting while the engines are too busy for the product's own work (for at most BUSY_PATIENCE_SECONDS
    in all): an evaluation never displaces a person's request."""
    give_up = time.monotonic() + BUSY_PATIENCE_SECONDS
    while True:
        try:
            generation = await database_sync_to_async(completion.start_evaluation, thread_sensitive=False)(
                evaluation.created_by,
                model,
                messages,
                node_group=node_group,
                max_tokens=max_tokens,
            )
        except (Busy, NoNodeAvailable) as busy:
            wait = float(busy.retry_after or 5)
            if time.monotonic() + wait > give_up:
                raise
            await asyncio.sleep(wait)
            continue
        started = time.monotonic()
        ending = await run.run(generation)
        return _Asked(ending, int((time.monotonic() - started) * 1000))


async def _score_item(evaluation: EvalRun, item: EvalItem) -> EvalResult:
    messages = [{"role": "system", "content": item.system_prompt}] if item.system_prompt else []
    messages.append({"role": "user", "content": item.prompt})
    result = EvalResult(run=evaluation, item=item)
    try:
        asked = await _ask(evaluation, evaluation.model, messages, ANSWER_TOKENS, evaluation.node_group or None)
    except Refusal as refusal:
        result.error = refusal.message[:500]
        result.detail = "Not answered: the item could not be sent."
        return result
    ending = asked.ending
    result.answer = ending.text
    result.latency_ms, result.ttft_ms = asked.latency_ms, ending.ttft_ms
    if ending.usage is not None:
        result.prompt_tokens, result.completion_tokens = ending.usage.prompt_tokens, ending.usage.completion_tokens
    if ending.status != COMPLETED:
        result.error = (ending.error or f"The answer ended {ending.status}.")[:500]
        result.detail = f"Not scored: the answer {ending.status}."
        return result
    try:
        if item.scorer == EvalItem.Scorer.JUDGE:
            verdict = await _judge(evaluation, item, ending.text)
        elif item.scorer == EvalItem.Scorer.SIMILARITY:
            verdict = await _similarity(item, ending.text)
        else:
            verdict = scoring.score(item.scorer, ending.text, reference=item.reference, schema=item.schema)
    except (re.error, SchemaError) as broken:  # an item edited by hand into one that cannot be scored
        result.error = f"The item cannot be scored: {broken}"[:500]
        result.detail = "Not scored: fix the item."
        return result
    result.score, result.passed, result.detail = verdict.value, verdict.passed, verdict.detail
    return result


async def _judge(evaluation: EvalRun, item: EvalItem, answer: str) -> scoring.Score:
    judge = evaluation.judge_model or evaluation.model
    prompt = scoring.judge_prompt(item.prompt, answer, item.reference)
    try:
        # The run's judge version, or wherever the judge model's traffic goes: never the version being judged.
        asked = await _ask(
            evaluation, judge, [{"role": "user", "content": prompt}], JUDGE_TOKENS, evaluation.judge_group or None
        )
    except Refusal as refusal:
        return scoring.Score(0.0, False, f"The judge could not be asked: {refusal.message}"[: scoring.DETAIL_CHARS])
    if asked.ending.status != COMPLETED:
        return scoring.Score(0.0, False, f"The judge's reply ended {asked.ending.status}.")
    return scoring.read_verdict(asked.ending.text)


async def _similarity(item: EvalItem, answer: str) -> scoring.Score:
    if not answer.strip():
        return scoring.Score(0.0, False, "The answer is empty.")
    try:
        embedded = await aembed_texts([answer, item.reference])
    except (Refusal, EngineError) as exc:
        said = exc.message if isinstance(exc, Refusal) else str(exc)
        return scoring.Score(
            0.0, False, f"Not scored: the texts could not be embedded ({said})"[: scoring.DETAIL_CHARS]
        )
    return scoring.similarity(embedded.vectors[0], embedded.vectors[1], item.threshold)


def _keep(evaluation: EvalRun, result: EvalResult) -> None:
    """The item's result and the run's progress, together; nothing when the item has its result already
    (the same run delivered twice, each scoring it)."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                result.save()
        except IntegrityError:
            return
        EvalRun.objects.filter(pk=evaluation.pk).update(
            items_done=F("items_done") + 1,
            items_passed=F("items_passed") + int(result.passed),
            score_sum=F("score_sum") + result.score,
            prompt_tokens=F("prompt_tokens") + result.prompt_tokens,
            completion_tokens=F("completion_tokens") + result.completion_tokens,
            heartbeat=timezone.now(),
        )


def _begin(run_id: int) -> tuple[EvalRun, list[EvalItem]] | None:
    """Claim the run: a queued one, or a running one whose worker has said nothing for STALE_SECONDS (it
    died, and Celery delivered the task again: the run goes on from the items without a result). A run
    another worker is running, or that has ended, is left alone (None)."""
    now = timezone.now()
    with transaction.atomic():
        evaluation = (
            EvalRun.objects.select_for_update(of=("self",)).select_related("created_by").filter(pk=run_id).first()
        )
        if evaluation is None:
            return None
        alive = evaluation.heartbeat is not None and (now - evaluation.heartbeat).total_seconds() < STALE_SECONDS
        if evaluation.status != EvalRun.Status.QUEUED and not (
            evaluation.status == EvalRun.Status.RUNNING and not alive
        ):
            return None
        evaluation.status, evaluation.heartbeat = EvalRun.Status.RUNNING, now
        evaluation.started = evaluation.started or now
        evaluation.save(update_fields=["status", "heartbeat", "started"])
    if evaluation.created_by is None:
        _end(run_id, EvalRun.Status.FAILED, "The staff member who started this run no longer has an account.")
        return None
    scored = set(evaluation.results.values_list("item_id", flat=True))
    return evaluation, [item for item in evaluation.eval_set.items.all() if item.pk not in scored]


def _end(run_id: int, status: str, error: str = "") -> None:
    """End a running run (once: a run another worker ended is left as it ended)."""
    ended = EvalRun.objects.filter(pk=run_id, status=EvalRun.Status.RUNNING).update(
        status=status, error=error[:500], finished=timezone.now()
    )
    run = EvalRun.objects.select_related("eval_set").get(pk=run_id)
    if ended and status == EvalRun.Status.COMPLETED and run.score is not None:
        metrics.EVAL_SCORE.labels(run.eval_set.name, run.model, run.node_group or "").set(run.score)


async def _execute(run_id: int) -> None:
    begun = await database_sync_to_async(_begin)(run_id)
    if begun is None:
        return
    evaluation, items = begun
    try:
        for item in items:
            result = await _score_item(evaluation, item)
            await database_sync_to_async(_keep)(evaluation, result)
    except Exception as exc:
        log.exception("evaluation run %s failed", run_id)
        await database_sync_to_async(_end)(run_id, EvalRun.Status.FAILED, f"The run stopped: {exc}")
        raise
    finally:
        # This loop is the task's own and ends with it: its engine and Redis connections go too.
        await engine.close_clients()
        await redis.close_async_clients()
    await database_sync_to_async(_end)(run_id, EvalRun.Status.COMPLETED)


def execute_run(run_id: int) -> None:
    """Run a queued evaluation to its end, item by item (from synchronous code: a Celery task)."""
    asyncio.run(_execute(run_id))


@shared_task(ignore_result=True, acks_late=True)
def run_evaluation(run_id: int) -> None:
    """The run as a Celery job (queued by evals.services.start_run)."""
    execute_run(run_id)
