"""The inference fleet: the nodes the product routes to, and how each model's traffic is split.

A node's health is kept on its row (the poller writes it when it changes); its load is not: samples
change every few seconds and live in Redis (inference.samples), so the path of a message never
writes here. Rows come from the admin, or from INFERENCE_NODES at start-up (inference.nodes).
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models


class InferenceNode(models.Model):
    class Health(models.TextChoices):
        UNKNOWN = "unknown", "unknown"
        UP = "up", "up"
        DOWN = "down", "down"

    name = models.SlugField(max_length=64, unique=True, help_text="Recorded on every answer it serves.")
    base_url = models.URLField(unique=True, help_text="The SGLang server, e.g. http://gpu-1:30000.")
    # A secret: the admin form takes a new one and never shows the stored one back.
    api_key = models.CharField(max_length=200, blank=True, help_text="The node's --api-key, if it has one.")
    model_ids = models.JSONField(
        default=list, blank=True, help_text="Model ids it serves (found from /v1/models by the poller when empty)."
    )
    group = models.SlugField(
        max_length=64,
        default="default",
        help_text="Its node group: one model version, for rollouts (see Model routes).",
    )
    weight = models.PositiveIntegerField(
        default=100,
        validators=[MinValueValidator(1)],
        help_text="Its share of new conversations, relative to its group.",
    )
    enabled = models.BooleanField(default=True)
    draining = models.BooleanField(default=False, help_text="Finishes its answers and takes no new ones.")
    health = models.CharField(max_length=8, choices=Health.choices, default=Health.UNKNOWN)
    health_changed = models.DateTimeField(null=True, blank=True)
    last_checked = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    #: Consecutive failed or passed health checks (the poller's thresholds count these).
    failures = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    capabilities = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="What its engine says it can do (inference.capabilities), read by the poller from "
        "/model_info and /server_info: tools, json_schema, embeddings, images.",
    )
    from_environment = models.BooleanField(
        default=False, editable=False, help_text="Created from INFERENCE_NODES at start-up."
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "name"]

    def __str__(self) -> str:
        return self.name


class ModelRoute(models.Model):
    """One node group's share of a model's traffic (blue-green rollouts between model versions)."""

    model = models.CharField(max_length=100, help_text="The model id users see (INFERENCE_MODELS).")
    group = models.SlugField(max_length=64, help_text="A node group serving a version of it.")
    weight = models.PositiveIntegerField(default=0, help_text="Its share of new conversations (0: none).")

    class Meta:
        ordering = ["model", "group"]
        constraints = [models.UniqueConstraint(fields=["model", "group"], name="inference_one_route_per_group")]

    def __str__(self) -> str:
        return f"{self.model} → {self.group} ({self.weight})"
