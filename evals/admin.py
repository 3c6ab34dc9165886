"""Evaluations in the staff console: eval sets (their items, imported from JSON Lines), runs started on one
version of a model, and each run's results item by item. Staff decide; evals.services acts and records
it in the audit log."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from chat.models import AnswerFeedback
from config.refusals import BadInput
from evals import rollouts, scoring, selectors, services
from evals.models import EvalItem, EvalResult, EvalRun, EvalSet, Rollout
from inference.catalogue import available_models
from inference.models import InferenceNode

#: The largest JSON Lines file staff may import at once.
IMPORT_MAX_BYTES = 5 * 1024 * 1024


def _model_choices() -> list[tuple[str, str]]:
    return [(m.id, f"{m.name} ({m.id})") for m in available_models() if m.kind != "auto"]


def _group_choices() -> list[tuple[str, str]]:
    groups = InferenceNode.objects.exclude(group="").values_list("group", flat=True).distinct().order_by("group")
    return [("", "Wherever the model's traffic goes"), *((g, g) for g in groups)]


class ImportForm(forms.Form):
    file = forms.FileField(required=False, help_text="A .jsonl file: one item a line (the fields are below).")
    text = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 8, "cols": 80}), label="Or paste the lines here"
    )

    def clean(self):
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > IMPORT_MAX_BYTES:
                raise forms.ValidationError("The file is larger than 5 MB: split it and import the parts.")
            try:
                data["lines"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
        else:
            data["lines"] = data.get("text") or ""
        if not data["lines"].strip():
            raise forms.ValidationError("Choose a file or paste some lines.")
        return data


class FromFeedbackForm(forms.Form):
    rating = forms.ChoiceField(
        choices=[("down", "Thumbs down with a comment"), ("up", "Thumbs up"), ("both", "Both")], initial="down"
    )
    model = forms.ChoiceField(required=False, help_text="Only answers this model wrote (any, when left empty).")
    days = forms.IntegerField(
        min_value=1, max_value=365, initial=30, help_text="Ratings given in the last this many days."
    )
    most = forms.IntegerField(min_value=1, max_value=500, initial=100, label="At most", help_text="The newest first.")
    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Copying people's questions (and the answers they liked) into a set is recorded in the audit log "
        "with this reason.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = [("", "Any model"), *_model_choices()]


class RunForm(forms.Form):
    model = forms.ChoiceField(help_text="The model to evaluate.")
    node_group = forms.ChoiceField(
        required=False,
        label="Version (node group)",
        help_text="One version of the model, by its node group: a version users do not get yet can be evaluated.",
    )
    judge_model = forms.ChoiceField(
        required=False, help_text="Grades the judge items (the evaluated model itself when left empty)."
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        models = _model_choices()
        self.fields["model"].choices = models
        self.fields["node_group"].choices = _group_choices()
        self.fields["judge_model"].choices = [("", "The evaluated model"), *models]


class EvalItemForm(forms.ModelForm):
    """An item typed on the set's page is held to what an imported one is (evals.scoring decides a pattern's
    and a schema's validity), so a run never meets one it cannot score."""

    class Meta:
        model = EvalItem
        fields = ("position", "scorer", "prompt", "reference", "schema", "threshold", "system_prompt")

    def clean(self):
        data = super().clean()
        scorer = data.get("scorer")
        if scorer == EvalItem.Scorer.JSON_SCHEMA:
            why = scoring.check_schema(data.get("schema"))
            if why is not None:
                self.add_error("schema", f"A JSON schema item needs its schema: {why}.")
        elif scorer and not (data.get("reference") or "").strip():
            self.add_error("reference", "This scorer needs its reference (the answer, pattern or rubric).")
        elif scorer == EvalItem.Scorer.REGEX and (why := scoring.check_pattern(data["reference"])) is not None:
            self.add_error("reference", f"The pattern cannot be used: {why}.")
        threshold = data.get("threshold")
        if threshold is not None and (scorer != EvalItem.Scorer.SIMILARITY or not 0 <= threshold <= 1):
            self.add_error("threshold", "Only a similarity item has a threshold, between 0 and 1.")
        return data


class EvalItemInline(admin.TabularInline):
    model = EvalItem
    form = EvalItemForm
    extra = 1
    fields = ("position", "scorer", "prompt", "reference", "schema", "threshold", "system_prompt")


@admin.register(EvalSet)
class EvalSetAdmin(admin.ModelAdmin):
    list_display = ("name", "item_count", "run_count", "created")
    search_fields = ("name", "description")
    inlines = (EvalItemInline,)
    readonly_fields = ("created_by", "created")
    fields = ("name", "description", "created_by", "created")

    def get_queryset(self, request):
        counted = {"_items": Count("items", distinct=True), "_runs": Count("runs", distinct=True)}
        return super().get_queryset(request).annotate(**counted)

    @admin.display(description="items", ordering="_items")
    def item_count(self, obj):
        return obj._items

    @admin.display(description="runs", ordering="_runs")
    def run_count(self, obj):
        return obj._runs

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    def get_urls(self):
        return [
            path("<int:set_id>/import/", self.admin_site.admin_view(self.import_view), name="evals_evalset_import"),
            path("<int:set_id>/run/", self.admin_site.admin_view(self.run_view), name="evals_evalset_run"),
            path(
                "<int:set_id>/from-feedback/",
                self.admin_site.admin_view(self.from_feedback_view),
                name="evals_evalset_from_feedback",
            ),
            *super().get_urls(),
        ]

    def _page(self, request: HttpRequest, eval_set: EvalSet, template: str, **context) -> HttpResponse:
        return TemplateResponse(
            request,
            template,
            {**self.admin_site.each_context(request), "opts": self.model._meta, "eval_set": eval_set, **context},
        )

    def import_view(self, request: HttpRequest, set_id: int) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        eval_set = get_object_or_404(EvalSet, pk=set_id)
        form = ImportForm(request.POST or None, request.FILES or None)
        error = ""
        if request.method == "POST" and form.is_valid():
            try:
                added = services.import_items(eval_set, form.cleaned_data["lines"], actor=request.user)
            except BadInput as refusal:
                error = refusal.message
            else:
                messages.success(request, f"{added} item{'' if added == 1 else 's'} imported into {eval_set}.")
                return HttpResponseRedirect(reverse("admin:evals_evalset_change", args=[eval_set.pk]))
        return self._page(
            request, eval_set, "admin/evals/evalset/import.html", form=form, error=error, fields=services.FIELDS
        )

    def from_feedback_view(self, request: HttpRequest, set_id: int) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        eval_set = get_object_or_404(EvalSet, pk=set_id)
        form = FromFeedbackForm(request.POST or None)
        error = ""
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            ratings = AnswerFeedback.objects.filter(created__gte=timezone.now() - timedelta(days=data["days"]))
            if data["rating"] != "both":
                ratings = ratings.filter(rating=data["rating"])
            if data["model"]:
                ratings = ratings.filter(message__model=data["model"])
            newest = ratings.order_by("-created", "-pk").values_list("pk", flat=True)[: data["most"]]
            try:
                added = services.items_from_feedback(
                    eval_set,
                    AnswerFeedback.objects.filter(pk__in=list(newest)),
                    reason=data["reason"],
                    actor=request.user,
                )
            except BadInput as refusal:
                error = refusal.message
            else:
                messages.success(
                    request, f"{added} item{'' if added == 1 else 's'} added to {eval_set} from rated answers."
                )
                return HttpResponseRedirect(reverse("admin:evals_evalset_change", args=[eval_set.pk]))
        return self._page(request, eval_set, "admin/evals/evalset/from_feedback.html", form=form, error=error)

    def run_view(self, request: HttpRequest, set_id: int) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        eval_set = get_object_or_404(EvalSet, pk=set_id)
        form = RunForm(request.POST or None)
        error = ""
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                evaluation = services.start_run(
                    eval_set,
                    model=data["model"],
                    node_group=data["node_group"],
                    judge_model=data["judge_model"],
                    actor=request.user,
                )
            except BadInput as refusal:
                error = refusal.message
            else:
                messages.success(request, f"The run of {eval_set} on {evaluation.model} has started.")
                return HttpResponseRedirect(reverse("admin:evals_evalrun_change", args=[evaluation.pk]))
        return self._page(request, eval_set, "admin/evals/evalset/run.html", form=form, error=error)


class EvalResultInline(admin.TabularInline):
    model = EvalResult
    extra = 0
    can_delete = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("item")

    fields = ("item_prompt", "passed", "score", "detail", "answer_start", "completion_tokens", "latency_ms", "error")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="prompt")
    def item_prompt(self, obj):
        return obj.item.prompt[:120]

    @admin.display(description="answer")
    def answer_start(self, obj):
        return obj.answer[:200]


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = ("eval_set", "model", "version", "status", "progress", "score_shown", "passed_shown", "created")
    list_filter = ("status", "model", "eval_set")
    inlines = (EvalResultInline,)
    actions = ("compare_runs",)

    @admin.action(description="Compare the two selected runs, item by item")
    def compare_runs(self, request, queryset):
        runs = list(queryset.select_related("eval_set").order_by("created", "pk"))
        if len(runs) != 2 or runs[0].eval_set_id != runs[1].eval_set_id:
            self.message_user(request, "Select exactly two runs of the same eval set to compare them.", messages.ERROR)
            return None
        comparison = selectors.compare(*runs)
        return TemplateResponse(
            request,
            "admin/evals/evalrun/compare.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "comparison": comparison,
                "better": comparison.count("better"),
                "worse": comparison.count("worse"),
                "same": comparison.count("same"),
            },
        )

    readonly_fields = (
        "eval_set",
        "model",
        "node_group",
        "judge_model",
        "status",
        "error",
        "progress",
        "score_shown",
        "passed_shown",
        "prompt_tokens",
        "completion_tokens",
        "created_by",
        "created",
        "started",
        "finished",
    )
    fields = readonly_fields

    def has_add_permission(self, request):
        return False  # a run is started from its eval set

    @admin.display(description="version")
    def version(self, obj):
        return obj.node_group or "—"

    @admin.display(description="progress")
    def progress(self, obj):
        return f"{obj.items_done} / {obj.items_total}"

    @admin.display(description="score")
    def score_shown(self, obj):
        return "—" if obj.score is None else f"{obj.score:.0%}"

    @admin.display(description="passed")
    def passed_shown(self, obj):
        if not obj.items_done:
            return "—"
        return format_html("{} of {}", obj.items_passed, obj.items_done)


class RolloutForm(forms.ModelForm):
    model = forms.ChoiceField(help_text="The model whose traffic moves to its new version.")
    from_group = forms.ChoiceField(label="Old version (node group)", help_text="The node group serving it now.")
    to_group = forms.ChoiceField(label="New version (node group)", help_text="The node group it moves to.")
    steps = forms.CharField(
        initial="1, 5, 25, 50, 100", help_text="The new version's share of the traffic at each step, in percent."
    )

    class Meta:
        model = Rollout
        fields = (
            "model",
            "from_group",
            "to_group",
            "steps",
            "window_seconds",
            "min_answers",
            "max_error_rate",
            "max_ttft_p95_ms",
            "min_tokens_per_second",
            "max_thumbs_down_rate",
            "max_block_rate",
            "eval_set",
            "eval_tolerance",
            "on_failure",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = _model_choices()
        groups = [choice for choice in _group_choices() if choice[0]]
        self.fields["from_group"].choices = groups
        self.fields["to_group"].choices = groups

    def clean_steps(self):
        parts = [part.strip().rstrip("%") for part in str(self.cleaned_data["steps"]).split(",") if part.strip()]
        try:
            return [int(part) for part in parts]
        except ValueError:
            raise forms.ValidationError(
                "Write whole percentages separated by commas, like 1, 5, 25, 50, 100."
            ) from None

    def clean(self):
        data = super().clean()
        if all(data.get(name) is not None for name in ("model", "from_group", "to_group", "steps")):
            try:
                rollouts.check_startable(
                    data["model"], data["from_group"], data["to_group"], data["steps"], data.get("eval_set")
                )
            except BadInput as refusal:
                raise forms.ValidationError(refusal.message) from None
        return data


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = ("model", "from_group", "to_group", "status", "share_shown", "step_shown", "created")
    list_filter = ("status", "model")
    actions = ("roll_back_selected", "resume_selected")
    form = RolloutForm
    readonly_fields = (
        "status",
        "share_shown",
        "step_shown",
        "step_started",
        "reason",
        "figures_shown",
        "before_eval",
        "after_eval",
        "created_by",
        "created",
        "finished",
    )

    def get_fields(self, request, obj=None):
        if obj is None:
            return RolloutForm.Meta.fields
        # Where it stands, then how it was set up (shown, not editable: see has_change_permission).
        return (*self.readonly_fields, *RolloutForm.Meta.fields[4:])

    def has_change_permission(self, request, obj=None):
        # A rollout is conducted by its service; staff start, roll back or resume it, nothing else.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        # One under way holds the model's weights: roll it back first.
        return super().has_delete_permission(request, obj) and (obj is None or obj.status not in Rollout.ACTIVE)

    @admin.display(description="this step, so far")
    def figures_shown(self, obj):
        """What each version served since the step began: what the step's gates will read of the new one."""
        if obj.step_started is None:
            return "—"
        rows = []
        for group in (obj.from_group, obj.to_group):
            f = selectors.version_figures(obj.model, group, obj.step_started)
            cells = (
                f.answers,
                f"{f.failed} of {f.sent}" + (f" ({f.error_rate:.1%})" if f.error_rate is not None else ""),
                f"{f.ttft_p95_ms} ms" if f.ttft_p95_ms is not None else "—",
                f"{f.tokens_per_second:.0f}" if f.tokens_per_second is not None else "—",
                f"{f.thumbs_down} of {f.rated}",
                f"{f.blocked}",
            )
            rows.append((group, *cells))
        return format_html(
            "<table data-testid='rollout-figures'><thead><tr><th scope='col'>version</th><th scope='col'>answers</th>"
            "<th scope='col'>failed requests</th><th scope='col'>TTFT p95</th><th scope='col'>tokens/s</th>"
            "<th scope='col'>thumbs down</th><th scope='col'>blocked</th></tr></thead><tbody>{}</tbody></table>",
            format_html_join(
                "",
                "<tr><th scope='row'>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                rows,
            ),
        )

    @admin.display(description="new version's share")
    def share_shown(self, obj):
        return f"{obj.share}%"

    @admin.display(description="step")
    def step_shown(self, obj):
        return f"{obj.step + 1} of {len(obj.steps)} ({', '.join(f'{s}%' for s in obj.steps)})"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        settings = {
            name: data[name]
            for name in RolloutForm.Meta.fields
            if name not in ("model", "from_group", "to_group", "steps", "eval_set")
        }
        # The form asked the service whether it can start (RolloutForm.clean); here it starts.
        started = rollouts.start_rollout(
            model=data["model"],
            from_group=data["from_group"],
            to_group=data["to_group"],
            steps=data["steps"],
            eval_set=data["eval_set"],
            actor=request.user,
            **settings,
        )
        obj.pk = started.pk

    def log_addition(self, request, obj, message):
        return None  # the service recorded the start in the audit log ("rollouts.start")

    @admin.action(description="Roll back the selected rollouts to their old version now")
    def roll_back_selected(self, request, queryset):
        for conducted in queryset.filter(status__in=Rollout.ACTIVE):
            rollouts.roll_back(conducted, reason=f"Rolled back by {request.user.email}.", actor=request.user)
            self.message_user(request, f"{conducted} rolled back: {conducted.from_group} has all the traffic.")

    @admin.action(description="Resume the selected held rollouts")
    def resume_selected(self, request, queryset):
        for conducted in queryset.filter(status=Rollout.Status.HELD):
            rollouts.resume(conducted, actor=request.user)
            self.message_user(request, f"{conducted} resumed at {conducted.share}%.")
