"""The `openai` backend: any OpenAI-compatible moderation endpoint (`POST {URL}/moderations`).

Sends `{"model": ..., "input": text}` with the key as a bearer token, within
MODERATION_TIMEOUT_SECONDS, and reads OpenAI's answer: `results[0].flagged`, and the categories
whose score is at or above MODERATION_THRESHOLD (or that the endpoint marked true). An error, a
timeout or an answer of another shape raises `BackendError`, for the fail mode to decide.
"""

from __future__ import annotations

import httpx
from django.conf import settings

from moderation.backends import BackendError, Hit


class OpenAIBackend:
    name = "openai"
    blocking = True  # a network round trip

    def __init__(self) -> None:
        self._client: httpx.Client | None = None

    def prepare(self, stage: str) -> None:
        pass

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client()
        return self._client

    def screen(self, text: str, stage: str) -> list[Hit]:
        url = settings.MODERATION_OPENAI_URL.rstrip("/") + "/moderations"
        key = settings.MODERATION_OPENAI_KEY
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            response = self._http().post(
                url,
                json={"model": settings.MODERATION_OPENAI_MODEL, "input": text},
                headers=headers,
                timeout=settings.MODERATION_TIMEOUT_SECONDS,
            )
        except httpx.TimeoutException as exc:
            raise BackendError(f"{url} took longer than {settings.MODERATION_TIMEOUT_SECONDS}s") from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"{url} could not be reached: {exc}") from exc
        if response.status_code != 200:
            raise BackendError(f"{url} answered {response.status_code}: {response.text[:200]}")
        try:
            result = response.json()["results"][0]
            flagged = bool(result["flagged"])
            scores: dict[str, float] = {k: float(v) for k, v in (result.get("category_scores") or {}).items()}
            marked = {k for k, v in (result.get("categories") or {}).items() if v}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"{url} answered in an unexpected shape: {response.text[:200]}") from exc
        threshold = settings.MODERATION_THRESHOLD
        names = sorted({k for k, v in scores.items() if v >= threshold} | marked, key=lambda k: -scores.get(k, 1.0))
        if not names and flagged:
            names = [max(scores, key=scores.get)] if scores else ["flagged"]
        return [
            Hit(category=name, block=True, score=round(scores.get(name, 1.0), 4), backend=self.name) for name in names
        ]


def backend() -> OpenAIBackend:
    return OpenAIBackend()
