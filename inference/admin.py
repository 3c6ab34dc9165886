"""Staff manage the fleet here: nodes (health, load, actions) and model rollouts.

Every action goes through inference.nodes (or asks the node directly: flush its cache, test a
generation) and is recorded in the audit log; form edits are audited by the console as every admin
edit is. Moderators see neither (console.roles grants them nothing here).
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit, urlunsplit

import httpx
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.utils import timezone
from django.utils.html import format_html

from audit.services import record
from inference import fleet, nodes, rollout
from inference.capabilities import CAPABILITIES
from inference.client import GenerationRequest, Timeouts
from inference.connect import engine_client
from inference.errors import EngineError
from inference.gateway import GatewayError
from inference.models import InferenceNode, ModelRoute

TEST_PROMPT = "Say hello in five words."
BADGES = {"up": "console-badge-ok", "down": "console-badge-danger", "draining": "console-badge-accent"}


class InferenceNodeForm(forms.ModelForm):
    base_url = forms.URLField(assume_scheme="http", help_text="The SGLang server, e.g. http://gpu-1:30000.")
    # Write-only: the stored key is never rendered back; leaving the box empty keeps it.
    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text="The node's --api-key. Leave empty to keep the stored one.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored API key")

    class Meta:
        model = InferenceNode
        fields = ("name", "base_url", "api_key", "model_ids", "group", "weight", "enabled", "draining")

    def clean(self):
        data = super().clean()
        if self.instance.pk and not data.get("api_key") and not data.get("clear_api_key"):
            data["api_key"] = InferenceNode.objects.get(pk=self.instance.pk).api_key
        if data.get("clear_api_key"):
            data["api_key"] = ""
        return data


def _without_credentials(url: str) -> str:
    """A URL as staff may read it: without a user and password written into it."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))


def _load_text(view: fleet.NodeView | None) -> str:
    if view is None or view.load is None:
        return "no fresh sample"
    load = view.load
    parts = [f"{load.running_requests} running", f"{load.waiting_requests} queued"]
    if load.token_usage is not None:
        parts.append(f"KV {load.token_usage:.0%}")
    if load.cache_hit_rate is not None:
        parts.append(f"cache hits {load.cache_hit_rate:.0%}")
    if view.sampled_at is not None:
        parts.append(f"{max(time.time() - view.sampled_at, 0):.0f} s ago")
    return " · ".join(parts)


@admin.register(InferenceNode)
class InferenceNodeAdmin(admin.ModelAdmin):
    form = InferenceNodeForm
    # The badge says enabled, draining or disabled too, so those are filters, not columns.
    list_display = ("name", "health_badge", "load", "served_models", "group", "weight", "last_checked")
    list_filter = ("health", "enabled", "draining", "group")
    search_fields = ("name", "base_url")
    readonly_fields = (
        "health",
        "health_changed",
        "last_checked",
        "last_error",
        "load",
        "can_do",
        "from_environment",
        "created",
    )
    actions = ("enable_nodes", "drain_nodes", "disable_nodes", "flush_cache", "test_generate")

    def get_queryset(self, request):
        self._views = {view.name: view for view in fleet.snapshot()}
        return super().get_queryset(request)

    def changelist_view(self, request, extra_context=None):
        # On the page itself, not again on an action's POST (its redirect would show it twice).
        if request.method == "GET" and settings.INFERENCE_ROUTING != "gateway" and not InferenceNode.objects.exists():
            # No rows is not no engine: SGLANG_URL is the one node, polled and judged like any.
            default = fleet.default_node()
            view = next((v for v in fleet.snapshot() if v.name == default.name), default)
            url = _without_credentials(view.base_url)
            self.message_user(
                request,
                f"No nodes are listed, so the engine at SGLANG_URL ({url}) serves every model as the "
                f'node "{view.name}": health {view.health}, load {_load_text(view)}. Add a node to use several.',
                level=messages.WARNING if view.health == "down" else messages.INFO,
            )
        return super().changelist_view(request, extra_context)

    @admin.display(description="health", ordering="health")
    def health_badge(self, node: InferenceNode) -> str:
        state = "draining" if node.draining and node.enabled else ("disabled" if not node.enabled else node.health)
        return format_html('<span class="console-badge {}">{}</span>', BADGES.get(state, ""), state)

    @admin.display(description="load")
    def load(self, node: InferenceNode) -> str:
        views = getattr(self, "_views", None) or {view.name: view for view in fleet.snapshot()}
        return format_html('<span class="console-usage">{}</span>', _load_text(views.get(node.name)))

    @admin.display(description="capabilities")
    def can_do(self, node: InferenceNode) -> str:
        """What its engine said it can do when last asked (inference.capabilities)."""
        if not node.capabilities:
            return "not known yet (asked when the poller first reaches it)"
        able = ", ".join(name for name in CAPABILITIES if node.capabilities.get(name)) or "plain text only"
        weights = node.capabilities.get("weight_version")
        return f"{able} · weights {weights}" if weights else able

    @admin.display(description="models")
    def served_models(self, node: InferenceNode) -> str:
        return ", ".join(node.model_ids) or "not known yet"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        fleet.invalidate()
        self._publish(request, obj)

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        fleet.invalidate()
        self._publish(request, obj, deleted=True)

    def delete_queryset(self, request, queryset):
        """ "Delete selected": the same as deleting each (smg forgets them, the fleet is read again)."""
        gone = list(queryset)
        super().delete_queryset(request, queryset)
        fleet.invalidate()
        for node in gone:
            self._publish(request, node, deleted=True)

    def _publish(self, request, node: InferenceNode, *, deleted: bool = False) -> None:
        try:
            nodes.publish(node, deleted=deleted)
        except GatewayError as exc:
            self.message_user(
                request,
                f"Saved, but the gateway could not be told yet ({exc}); the poller will try again.",
                messages.WARNING,
            )

    def _each(self, request, queryset, action: str, apply) -> None:
        for node in queryset:
            try:
                apply(node)
            except GatewayError as exc:
                self.message_user(
                    request,
                    f"{node.name}: saved, but the gateway could not be told yet ({exc}); the poller will try again.",
                    messages.WARNING,
                )
            record(request.user, f"inference.{action}", node)
        self.message_user(request, f"{action.capitalize()}: {', '.join(n.name for n in queryset)}.", messages.SUCCESS)

    @admin.action(description="Enable (take new requests)", permissions=["change"])
    def enable_nodes(self, request, queryset):
        self._each(request, queryset, "enable", nodes.enable)

    @admin.action(description="Drain (finish answers, take no new ones)", permissions=["change"])
    def drain_nodes(self, request, queryset):
        self._each(request, queryset, "drain", nodes.drain)

    @admin.action(description="Disable", permissions=["change"])
    def disable_nodes(self, request, queryset):
        self._each(request, queryset, "disable", nodes.disable)

    @admin.action(description="Flush the prefix cache", permissions=["change"])
    def flush_cache(self, request, queryset):
        for node in queryset:
            ok, said = _flush_cache(node)
            record(request.user, "inference.flush_cache", node, details={"ok": ok, "answer": said})
            self.message_user(
                request,
                f"{node.name}: cache {'flushed' if ok else 'not flushed'} ({said}).",
                messages.SUCCESS if ok else messages.ERROR,
            )

    @admin.action(description="Test: generate a short answer", permissions=["change"])
    def test_generate(self, request, queryset):
        for node in queryset:
            ok, said = asyncio.run(_test_generation(node))
            record(request.user, "inference.test_generate", node, details={"ok": ok, "answer": said[:200]})
            self.message_user(request, f"{node.name}: {said}", messages.SUCCESS if ok else messages.ERROR)


def _flush_cache(node: InferenceNode) -> tuple[bool, str]:
    headers = {"Authorization": f"Bearer {node.api_key}"} if node.api_key else {}
    try:
        response = httpx.post(f"{node.base_url}/flush_cache", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    if response.status_code == 400:
        # SGLang flushes only an idle server, and says so in a body that reads like success.
        return False, (
            "HTTP 400: it had requests running or waiting, and SGLang flushes only an idle node; "
            "drain it and try again once its answers have finished"
        )
    return response.is_success, f"HTTP {response.status_code}"


async def _test_generation(node: InferenceNode) -> tuple[bool, str]:
    model = node.model_ids[0] if node.model_ids else "default"
    request = GenerationRequest(
        messages=[{"role": "user", "content": TEST_PROMPT}], model=model, max_new_tokens=16, temperature=0.0
    )
    started = timezone.now()
    try:
        async with engine_client(
            node.base_url, api_key=node.api_key, timeouts=Timeouts(first_token=20, total=30)
        ) as client:
            result = await client.generate(request)
    except EngineError as exc:
        return False, f"failed: {exc.detail}"
    took = (timezone.now() - started).total_seconds()
    tokens = result.usage.completion_tokens if result.usage is not None else "?"
    return True, f"answered in {took:.2f} s with {tokens} tokens: {result.text!r}"


@admin.register(ModelRoute)
class ModelRouteAdmin(admin.ModelAdmin):
    list_display = ("model", "group", "weight")
    list_editable = ("weight",)
    list_filter = ("model",)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        rollout.invalidate()

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        rollout.invalidate()
