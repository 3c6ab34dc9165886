"""A stand-in for Stripe's HTTP API on a loopback port: the one edge the tests cannot reach for real.

The official SDK is pointed at it (STRIPE_API_BASE), so everything from the SDK inwards is the real
code path. It records each request (method, path, form parameters, headers) and answers in the
shapes of Stripe's API: customers, Checkout Sessions, Customer Portal sessions and subscriptions.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

from tests.billing.stripe_payloads import PRICES, WEBHOOK_SECRET

#: A price id the stand-in does not know, to see how a Stripe error reaches the user.
MISSING_PRICE = "price_missing"


@dataclass
class Recorded:
    method: str
    path: str
    params: dict
    headers: dict


@dataclass
class StripeStandIn:
    requests: list[Recorded] = field(default_factory=list)
    #: Subscriptions the API answers with on GET /v1/subscriptions/<id> (POST sets cancel_at_period_end,
    #: DELETE cancels).
    subscriptions: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self):
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                path, _, query = self.path.partition("?")
                params = dict(parse_qsl(body or query, keep_blank_values=True))
                with standin._lock:
                    standin.requests.append(Recorded(self.command, path, params, dict(self.headers)))
                status, payload = standin.route(self.command, path, params)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Request-Id", f"req_{next(standin._ids)}")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StripeStandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def route(self, method: str, path: str, params: dict) -> tuple[int, dict]:
        n = next(self._ids)
        if (method, path) == ("POST", "/v1/customers"):
            return 200, {
                "id": f"cus_standin{n}",
                "object": "customer",
                "email": params.get("email"),
                "metadata": {"user_id": params.get("metadata[user_id]")},
                "livemode": False,
            }
        if (method, path) == ("POST", "/v1/checkout/sessions"):
            if params.get("line_items[0][price]") == MISSING_PRICE:
                return 400, {
                    "error": {
                        "type": "invalid_request_error",
                        "code": "resource_missing",
                        "param": "line_items[0][price]",
                        "message": f"No such price: '{MISSING_PRICE}'",
                    }
                }
            return 200, {
                "id": f"cs_test_{n}",
                "object": "checkout.session",
                "mode": params.get("mode"),
                "customer": params.get("customer"),
                "client_reference_id": params.get("client_reference_id"),
                "status": "open",
                "url": f"https://checkout.stripe.com/c/pay/cs_test_{n}",
                "livemode": False,
            }
        if (method, path) == ("POST", "/v1/billing_portal/sessions"):
            return 200, {
                "id": f"bps_{n}",
                "object": "billing_portal.session",
                "customer": params.get("customer"),
                "return_url": params.get("return_url"),
                "url": f"https://billing.stripe.com/p/session/test_{n}",
                "livemode": False,
            }
        if path.startswith("/v1/subscriptions/"):
            sub_id = path.rsplit("/", 1)[1]
            if sub_id not in self.subscriptions:
                return 404, {
                    "error": {
                        "type": "invalid_request_error",
                        "code": "resource_missing",
                        "message": f"No such subscription: '{sub_id}'",
                    }
                }
            if method == "DELETE":
                self.subscriptions[sub_id] = {**self.subscriptions[sub_id], "status": "canceled"}
            elif method == "POST" and "cancel_at_period_end" in params:
                self.subscriptions[sub_id] = {
                    **self.subscriptions[sub_id],
                    "cancel_at_period_end": params["cancel_at_period_end"] == "true",
                }
            return 200, self.subscriptions[sub_id]
        return 404, {
            "error": {"type": "invalid_request_error", "message": f"Unrecognized request URL ({method} {path})."}
        }


@contextlib.contextmanager
def stripe_stood_in(settings) -> Iterator[StripeStandIn]:
    """Stripe as the payment provider (in pytest-django's `settings`), its API answered by a stand-in
    that runs until the block ends."""
    standin = StripeStandIn().start()
    try:
        settings.PAYMENT_PROVIDER = "stripe"
        settings.STRIPE_SECRET_KEY = "sk_test_standin"
        settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
        settings.STRIPE_API_BASE = standin.url
        settings.STRIPE_PRICES = dict(PRICES)
        yield standin
    finally:
        standin.stop()
