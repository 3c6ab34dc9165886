"""Eval sets and their runs.

An eval set is a list of prompts (items), each with the rule its answer is scored by: the reference
answer exactly or contained, a JSON schema the answer must satisfy, a regular expression it must match,
or a rubric a judge model grades it against (evals.scoring). A run sends every item of a set to one
version of a model (a node group, inference.models.InferenceNode.group) through the product's own
inference path, and keeps each item's answer, score, tokens and latency, so two runs (two versions)
can be compared item by item.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models


class EvalSet(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "eval set"

    def __str__(self) -> str:
        return self.name


class EvalItem(models.Model):
    class Scorer(models.TextChoices):
        EXACT = "exact", "The reference answer, exactly"
        CONTAINS = "contains", "Contains the reference answer"
        JSON_SCHEMA = "json_schema", "JSON valid against a schema"
        REGEX = "regex", "Matches a regular expression"
        SIMILARITY = "similarity", "Close in meaning to the reference (embeddings)"
        JUDGE = "judge", "A judge model's verdict on a rubric"

    eval_set = models.ForeignKey(EvalSet, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField(default=0)
    system_prompt = models.TextField(blank=True)
    prompt = models.TextField()
    scorer = models.CharField(max_length=16, choices=Scorer.choices)
    #: What the scorer holds the answer to: the reference answer (exact, contains, similarity), the pattern
    #: (regex), or the rubric (judge). A JSON schema item keeps its schema in `schema`.
    reference = models.TextField(blank=True)
    schema = models.JSONField(null=True, blank=True)
    #: A similarity item passes from this cosine between the answer's embedding and the reference's.
    threshold = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["eval_set", "position", "id"]
        verbose_name = "eval item"

    def __str__(self) -> str:
        return f"{self.eval_set} #{self.position}: {self.prompt[:60]}"


class EvalRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"

    eval_set = models.ForeignKey(EvalSet, on_delete=models.CASCADE, related_name="runs")
    model = models.CharField(max_length=100)
    #: The version evaluated: a node group serving the model; empty for wherever its traffic goes.
    node_group = models.SlugField(max_length=64, blank=True)
    #: The model that grades the judge items (empty: the set has none, or the evaluated model itself).
    judge_model = models.CharField(max_length=100, blank=True)
    #: The version (node group) of the judge model that grades them; empty: wherever its traffic goes. A
    #: rollout's two runs are graded by the old version, so that neither version grades itself.
    judge_group = models.SlugField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    error = models.CharField(max_length=500, blank=True)
    items_total = models.PositiveIntegerField(default=0)
    items_done = models.PositiveIntegerField(default=0)
    items_passed = models.PositiveIntegerField(default=0)
    #: The sum of the items' scores (each from 0 to 1): the run's score is its mean.
    score_sum = models.FloatField(default=0.0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    #: When its worker last kept a result (a run whose worker died is taken over: evals.runner).
    heartbeat = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "eval run"

    def __str__(self) -> str:
        version = f" ({self.node_group})" if self.node_group else ""
        return f"{self.eval_set} on {self.model}{version}, {self.created:%Y-%m-%d %H:%M}"

    @property
    def score(self) -> float | None:
        """The mean of the items' scores, from 0 to 1, once an item is scored."""
        return self.score_sum / self.items_done if self.items_done else None


class EvalResult(models.Model):
    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    item = models.ForeignKey(EvalItem, on_delete=models.CASCADE, related_name="results")
    answer = models.TextField(blank=True)
    score = models.FloatField(default=0.0)
    passed = models.BooleanField(default=False)
    #: Why it scored so, in a sentence (the scorer's, or the judge's reason).
    detail = models.CharField(max_length=500, blank=True)
    #: The generation's failure, when it did not complete (scored 0).
    error = models.CharField(max_length=500, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item__position", "item_id"]
        constraints = [models.UniqueConstraint(fields=["run", "item"], name="eval_result_once_per_item")]
        verbose_name = "eval result"

    def __str__(self) -> str:
        return f"{self.item} in run {self.run_id}: {self.score:.0%}"


class Rollout(models.Model):
    """A new version of a model (a node group) brought in beside the one serving it, step by step: at each
    step it gets a larger share of the model's traffic (ModelRoute weights), and the step's gates are
    judged on what it served over the step's window; a gate that fails holds the rollout at its step or
    rolls it back to the old version at once (`on_failure`). Conducted by evals.rollouts."""

    class Status(models.TextChoices):
        RUNNING = "running"
        HELD = "held"
        COMPLETED = "completed"
        ROLLED_BACK = "rolled_back", "rolled back"

    class OnFailure(models.TextChoices):
        ROLL_BACK = "roll_back", "Roll back to the old version at once"
        HOLD = "hold", "Hold at the step, for staff to decide"

    ACTIVE = (Status.RUNNING, Status.HELD)

    model = models.CharField(max_length=100)
    #: The version serving the model now (A) and the new one (B): node groups.
    from_group = models.SlugField(max_length=64)
    to_group = models.SlugField(max_length=64)
    #: The new version's share of the traffic at each step, in percent, rising to 100.
    steps = models.JSONField(default=list)
    step = models.PositiveIntegerField(default=0, help_text="The current step: an index into steps.")
    step_started = models.DateTimeField(null=True, blank=True)
    #: How long each step is watched before its gates are judged, and the answers the new version must
    #: have given in that time for them to be judged at all (until then the step goes on).
    window_seconds = models.PositiveIntegerField(
        default=600, validators=[MaxValueValidator(6 * 3600)], help_text="At most 6 hours (the per-minute counts kept)."
    )
    min_answers = models.PositiveIntegerField(default=20)
    # The gates, on the new version over the step's window (empty: not checked).
    max_error_rate = models.FloatField(
        null=True, blank=True, default=0.05, help_text="Failed requests / requests sent to it (0 to 1)."
    )
    max_ttft_p95_ms = models.PositiveIntegerField(null=True, blank=True, help_text="Time to first token, p95.")
    min_tokens_per_second = models.FloatField(null=True, blank=True, help_text="Output tokens per second of decoding.")
    max_thumbs_down_rate = models.FloatField(null=True, blank=True, help_text="Thumbs down / rated answers (0 to 1).")
    max_block_rate = models.FloatField(null=True, blank=True, help_text="Answers blocked by moderation (0 to 1).")
    eval_set = models.ForeignKey(
        EvalSet,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Run on both versions when the rollout starts: the new one must score at least the old one's, "
        "less the tolerance.",
    )
    eval_tolerance = models.FloatField(default=0.0)
    before_eval = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    after_eval = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    on_failure = models.CharField(max_length=16, choices=OnFailure.choices, default=OnFailure.ROLL_BACK)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    #: The last decision's reason, in sentences: why it holds, why it rolled back, what it waits for.
    reason = models.CharField(max_length=1000, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["model"],
                condition=models.Q(status__in=["running", "held"]),
                name="one_active_rollout_per_model",
            )
        ]

    def __str__(self) -> str:
        return f"{self.model}: {self.from_group} → {self.to_group}"

    @property
    def share(self) -> int:
        """The new version's share of the traffic now, in percent."""
        if self.status == self.Status.ROLLED_BACK:
            return 0
        return int(self.steps[min(self.step, len(self.steps) - 1)]) if self.steps else 0
