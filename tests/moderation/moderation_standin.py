"""A stand-in for an OpenAI-compatible moderation endpoint on a loopback port.

It answers POST /v1/moderations in OpenAI's shape from a keyword policy given by the test (a word
and the category it stands for), can be told to answer slowly, to hold its answers until the test
releases them, or to answer with an error, and records each request and each answer. It is the edge the tests cannot reach for real; everything from the HTTP call inwards is
the product's code.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CATEGORIES = ("harassment", "hate", "self-harm", "sexual", "violence")


@dataclass
class ModerationStandIn:
    #: word -> OpenAI category: a text containing the word scores 0.97 in it.
    policy: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    status: int = 200
    requests: list[dict] = field(default_factory=list)
    #: How many answers it has written (a held request is not answered until `release`).
    answered: int = 0
    _released: threading.Event = field(default_factory=threading.Event)
    _held: bool = False

    def hold(self) -> None:
        """Answer nothing until `release` (an endpoint that has the request and has not answered yet)."""
        self._released.clear()
        self._held = True

    def release(self) -> None:
        self._held = False
        self._released.set()

    def __post_init__(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                standin.requests.append(
                    {"path": self.path, "body": body, "authorization": self.headers.get("Authorization")}
                )
                time.sleep(standin.delay_s)
                if standin._held:
                    standin._released.wait(60)
                status, payload = (
                    (standin.status, {"error": {"message": "stand-in failure"}})
                    if standin.status != 200
                    else (200, standin.answer(body.get("input", "")))
                )
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass
                standin.answered += 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, text: str) -> dict:
        hit = {category for word, category in self.policy.items() if word in text.lower()}
        scores = {c: (0.97 if c in hit else 0.01) for c in CATEGORIES}
        return {
            "id": "modr-standin",
            "model": "omni-moderation-latest",
            "results": [
                {"flagged": bool(hit), "categories": {c: c in hit for c in CATEGORIES}, "category_scores": scores}
            ],
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def __enter__(self) -> ModerationStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
