"""What the API keeps: the responses of the Responses API (`/v1/responses`), for their owner."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class StoredResponse(models.Model):
    """One response, kept (unless the request said `store: false`) so that its owner can read it
    back (`GET /v1/responses/{id}`) and continue from it (`previous_response_id`). Kept for
    API_RESPONSES_RETENTION_DAYS, then purged (api.tasks.purge_expired_responses)."""

    #: `resp_<hex>`: the hex is the generation's id, as in its ledger row (`api:<hex>`).
    id = models.CharField(primary_key=True, max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="stored_responses")
    model = models.CharField(max_length=200)
    #: The conversation it answered, in chat-message form (its instructions apart: they do not carry over).
    messages = models.JSONField()
    #: The response object as it was returned (its output, usage, and the request's settings).
    body = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"])]

    def __str__(self) -> str:
        return self.id
