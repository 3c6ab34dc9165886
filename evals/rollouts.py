"""Rollouts: a new version of a model brought in beside the old one, step by step, on measured quality.

`start_rollout` gives the new version (a node group, B) the first step's share of the model's traffic
and the old one (A) the rest (ModelRoute weights, read by the router: inference.rollout), and starts the
rollout's eval set on both versions. `check_rollout` (every ROLLOUT_CHECK_SECONDS, evals.tasks) judges a
step once its window has passed and B has written enough answers in it: the gates read what B served
in the window (evals.selectors.version_figures: the failed share of the requests sent to it, time to
first token p95, decoding speed, thumbs down, moderation blocks) and the eval score of B against A's.
All pass: the next step (or, after the last, B has all the traffic). One fails: the rollout holds at
its step, or rolls back at once (A gets all the traffic again), as it was set up, and says why. The
router keeps a conversation on the version it started with while its cache is warm, and takes none
to a version with no share: a rollback moves every conversation back to A.

Every step and decision is in the audit log (staff's under their name; the rollout's own under none).
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit import services as audit
from config import metrics
from config.refusals import BadInput
from evals import selectors
from evals.models import EvalRun, EvalSet, Rollout
from evals.services import check_version, start_run
from inference import fleet, rollout
from inference.models import ModelRoute

log = logging.getLogger(__name__)

DEFAULT_STEPS = (1, 5, 25, 50, 100)


def _valid_steps(steps: Sequence[object]) -> list[int]:
    if not steps or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
        raise BadInput("The steps are whole percentages, for example 1, 5, 25, 50, 100.")
    if any(b <= a for a, b in itertools.pairwise(steps)) or steps[0] < 1 or steps[-1] != 100:
        raise BadInput("The steps must rise from at least 1% and end at 100%, for example 1, 5, 25, 50, 100.")
    return list(steps)


def _report(conducted: Rollout) -> None:
    """The rollout's share and status for Prometheus (sglchat_rollout_share_percent, sglchat_rollout_state)."""
    metrics.ROLLOUT_SHARE.labels(conducted.model, conducted.to_group).set(conducted.share)
    for status in Rollout.Status.values:
        metrics.ROLLOUT_STATE.labels(conducted.model, conducted.to_group, status).set(int(status == conducted.status))


def _set_share(model: str, from_group: str, to_group: str, share: int) -> None:
    """The new version's share of the model's traffic, in percent; the old one has the rest."""
    for group, weight in ((from_group, 100 - share), (to_group, share)):
        ModelRoute.objects.update_or_create(model=model, group=group, defaults={"weight": weight})
    transaction.on_commit(rollout.invalidate)  # this process at once; the others on their next refresh


def check_startable(
    model: str, from_group: str, to_group: str, steps: Sequence[object], eval_set: EvalSet | None = None
) -> list[int]:
    """The steps, when a rollout of `model` from `from_group` to `to_group` can start; else BadInput saying
    why: the same group twice, a group with no enabled node, steps that do not rise to 100, or a rollout
    of this model already under way."""
    if settings.INFERENCE_ROUTING == "gateway":
        raise BadInput(
            "Behind the SGLang Model Gateway the gateway routes every request: a rollout's weights would not "
            "reach it. Roll out with the product's own routing (INFERENCE_ROUTING)."
        )
    if from_group == to_group:
        raise BadInput("The new version must be another node group than the one serving the model now.")
    for group in (from_group, to_group):
        check_version(group)
    if eval_set is not None and not eval_set.items.exists():
        raise BadInput(f"The eval set {eval_set.name!r} has no items yet: import some, or choose no eval set.")
    if Rollout.objects.filter(model=model, status__in=Rollout.ACTIVE).exists():
        raise BadInput(f"A rollout of {model} is under way: finish it or roll it back first.")
    return _valid_steps(steps)


def start_rollout(
    *,
    model: str,
    from_group: str,
    to_group: str,
    steps: Sequence[object] = DEFAULT_STEPS,
    eval_set: EvalSet | None = None,
    actor=None,
    **setup,
) -> Rollout:
    """Begin moving `model`'s traffic from the node group `from_group` to `to_group`. `setup` is the
    rollout's window, minimum answers, gates and failure action (the fields of Rollout). Raises BadInput
    when it cannot start (`check_startable`)."""
    steps = check_startable(model, from_group, to_group, steps, eval_set)
    with transaction.atomic():
        if Rollout.objects.select_for_update().filter(model=model, status__in=Rollout.ACTIVE).exists():
            raise BadInput(f"A rollout of {model} is under way: finish it or roll it back first.")
        conducted = Rollout.objects.create(
            model=model,
            from_group=from_group,
            to_group=to_group,
            steps=steps,
            step_started=timezone.now(),
            eval_set=eval_set,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
            **setup,
        )
        _set_share(model, from_group, to_group, steps[0])
        audit.record(actor, "rollouts.start", conducted, details={"steps": steps, "share": steps[0]})
    _report(conducted)
    if eval_set is not None:
        # Both graded by the old version, so that the new one never grades itself.
        before = start_run(eval_set, model=model, node_group=from_group, judge_group=from_group, actor=actor)
        after = start_run(eval_set, model=model, node_group=to_group, judge_group=from_group, actor=actor)
        Rollout.objects.filter(pk=conducted.pk).update(before_eval=before, after_eval=after)
        conducted.before_eval, conducted.after_eval = before, after
    fleet.invalidate()
    return conducted


def _pct(value: float) -> str:
    return f"{value:.1%}"


def failed_gates(conducted: Rollout, figures: selectors.VersionFigures) -> list[str]:
    """The gates the new version failed over the step's window, each as a sentence (none: all passed). A
    gate with no limit set, or with nothing measured yet (no rated answer, say), does not fail."""
    f, r = figures, conducted
    gates = [
        (
            r.max_error_rate,
            f.error_rate,
            operator.gt,
            lambda: (
                f"Error rate {_pct(f.error_rate)} ({f.failed} of {f.sent} requests) is over {_pct(r.max_error_rate)}."
            ),
        ),
        (
            r.max_ttft_p95_ms,
            f.ttft_p95_ms,
            operator.gt,
            lambda: f"Time to first token p95 {f.ttft_p95_ms} ms is over {r.max_ttft_p95_ms} ms.",
        ),
        (
            r.min_tokens_per_second,
            f.tokens_per_second,
            operator.lt,
            lambda: f"Decoding at {f.tokens_per_second:.1f} tokens a second is under {r.min_tokens_per_second:g}.",
        ),
        (
            r.max_thumbs_down_rate,
            f.thumbs_down_rate,
            operator.gt,
            lambda: (
                f"Thumbs down on {_pct(f.thumbs_down_rate)} of rated answers ({f.thumbs_down} of {f.rated}) is over "
                f"{_pct(r.max_thumbs_down_rate)}."
            ),
        ),
        (
            r.max_block_rate,
            f.block_rate,
            operator.gt,
            lambda: (
                f"Moderation blocked {_pct(f.block_rate)} of answers ({f.blocked} of {f.answers}), over "
                f"{_pct(r.max_block_rate)}."
            ),
        ),
    ]
    return [
        said()
        for limit, value, beyond, said in gates
        if limit is not None and value is not None and beyond(value, limit)
    ]


def _eval_verdict(conducted: Rollout) -> tuple[str, str]:
    """("pass" | "fail" | "wait", sentence) for the eval gate; ("pass", "") when the rollout has none."""
    if conducted.eval_set_id is None:
        return "pass", ""
    runs = [EvalRun.objects.filter(pk=pk).first() for pk in (conducted.before_eval_id, conducted.after_eval_id)]
    if any(run is None for run in runs):
        return "fail", "An eval run of the rollout was deleted: the new version's quality is unknown."
    before, after = runs
    if EvalRun.Status.FAILED in (before.status, after.status):
        return "fail", "An eval run of the rollout failed: the new version's quality is unknown."
    if before.status != EvalRun.Status.COMPLETED or after.status != EvalRun.Status.COMPLETED:
        return (
            "wait",
            f"Waiting for the eval runs ({before.items_done + after.items_done} of {before.items_total * 2} items).",
        )
    low = (before.score or 0.0) - conducted.eval_tolerance
    if (after.score or 0.0) < low:
        return "fail", (
            f"Eval score {_pct(after.score or 0.0)} on {conducted.to_group} is under {conducted.from_group}'s "
            f"{_pct(before.score or 0.0)}"
            + (f" less {_pct(conducted.eval_tolerance)}." if conducted.eval_tolerance else ".")
        )
    return "pass", ""


def check_rollout(conducted: Rollout, now=None) -> str:
    """Judge the rollout's step if it is due, and act: returns "watching" (the window has not passed, too
    few answers yet, or the evals are still running and nothing failed), "advanced", "completed", "held"
    or "rolled back" (or the status it already had, when it is not running). A failed eval acts at once;
    the other gates are judged once the window has passed and the new version has served `min_answers`."""
    now = now or timezone.now()
    if conducted.status != Rollout.Status.RUNNING:
        return conducted.status
    verdict, said = _eval_verdict(conducted)
    due = (now - conducted.step_started).total_seconds() >= conducted.window_seconds
    figures = (
        selectors.version_figures(conducted.model, conducted.to_group, conducted.step_started)
        if due or verdict == "fail"
        else selectors.VersionFigures()
    )
    enough = due and max(figures.answers, figures.sent) >= conducted.min_answers
    failures = (failed_gates(conducted, figures) if enough else []) + ([said] if verdict == "fail" else [])
    if not failures:
        if not due:
            return _watching(conducted, said if verdict == "wait" else "")
        if not enough:
            return _watching(
                conducted,
                f"Waiting for answers from {conducted.to_group}: {max(figures.answers, figures.sent)} of "
                f"{conducted.min_answers}.",
            )
        if verdict == "wait":
            return _watching(conducted, said)  # its gates hold so far; it advances once the evals agree
    return _act(conducted, now, figures, failures)


def _locked(conducted: Rollout, *statuses: str) -> bool:
    """Lock the rollout's row (inside a transaction) and say whether it is still as `conducted` was read: in
    one of `statuses`, at the same step. A decision taken meanwhile (staff rolled it back while the beat
    judged it) is never undone by the one that lost the race."""
    current = Rollout.objects.select_for_update().filter(pk=conducted.pk).values("status", "step").first()
    return current is not None and current["status"] in statuses and current["step"] == conducted.step


def _act(conducted: Rollout, now, figures: selectors.VersionFigures, failures: list[str]) -> str:
    with transaction.atomic():
        if not _locked(conducted, Rollout.Status.RUNNING):
            conducted.refresh_from_db()
            return conducted.status
        if failures:
            reason = " ".join(failures)
            if conducted.on_failure == Rollout.OnFailure.HOLD:
                _decide(conducted, Rollout.Status.HELD, reason, "rollouts.hold", figures)
                return "held"
            _set_share(conducted.model, conducted.from_group, conducted.to_group, 0)
            _decide(conducted, Rollout.Status.ROLLED_BACK, reason, "rollouts.roll_back", figures)
            return "rolled back"
        if conducted.step + 1 >= len(conducted.steps):
            _decide(conducted, Rollout.Status.COMPLETED, "Every step passed its gates.", "rollouts.complete", figures)
            return "completed"
        conducted.step += 1
        conducted.step_started = now
        conducted.reason = ""
        conducted.save(update_fields=["step", "step_started", "reason"])
        _set_share(conducted.model, conducted.from_group, conducted.to_group, conducted.share)
        audit.record(
            None, "rollouts.advance", conducted, details={"share": conducted.share, "figures": figures.as_dict()}
        )
    _report(conducted)
    return "advanced"


def _watching(conducted: Rollout, reason: str) -> str:
    if conducted.reason != reason:
        Rollout.objects.filter(pk=conducted.pk, status=Rollout.Status.RUNNING).update(reason=reason)
        conducted.reason = reason
    return "watching"


def _decide(conducted: Rollout, status: str, reason: str, action: str, figures, actor=None) -> None:
    """Record a decision on a rollout whose row the caller has locked (`_locked`)."""
    conducted.status, conducted.reason = status, reason[:1000]
    if status in (Rollout.Status.COMPLETED, Rollout.Status.ROLLED_BACK):
        conducted.finished = timezone.now()
    conducted.save(update_fields=["status", "reason", "finished"])
    audit.record(
        actor,
        action,
        conducted,
        reason=reason,
        details={"share": conducted.share, "reason": reason, "figures": figures.as_dict() if figures else None},
    )
    transaction.on_commit(lambda: _report(conducted))
    log.warning("rollout %s of %s: %s (%s)", conducted.pk, conducted.model, action, reason)


def roll_back(conducted: Rollout, *, reason: str, actor=None) -> None:
    """Give the old version all of the model's traffic again, at once, and end the rollout (staff)."""
    with transaction.atomic():
        if not _locked(conducted, *Rollout.ACTIVE):
            raise BadInput("Only a rollout under way can be rolled back: this one has ended meanwhile.")
        _set_share(conducted.model, conducted.from_group, conducted.to_group, 0)
        _decide(conducted, Rollout.Status.ROLLED_BACK, reason, "rollouts.roll_back", None, actor)


def resume(conducted: Rollout, *, actor) -> None:
    """Staff let a held rollout go on: its step is watched afresh from now."""
    with transaction.atomic():
        if not _locked(conducted, Rollout.Status.HELD):
            raise BadInput("Only a held rollout can be resumed.")
        conducted.status, conducted.step_started, conducted.reason = Rollout.Status.RUNNING, timezone.now(), ""
        conducted.save(update_fields=["status", "step_started", "reason"])
        audit.record(actor, "rollouts.resume", conducted, details={"share": conducted.share})
    _report(conducted)


def check_rollouts() -> dict[int, str]:
    """Check every running rollout (Celery beat); returns what each did."""
    done = {}
    for conducted in Rollout.objects.filter(status=Rollout.Status.RUNNING):
        try:
            done[conducted.pk] = check_rollout(conducted)
        except Exception:  # one rollout that cannot be judged must not keep the others from theirs
            log.exception("could not check rollout %s", conducted.pk)
    return done
