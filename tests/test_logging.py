"""What the product logs: its own lines, not a line per HTTP request its clients make."""

import httpx


def test_the_engine_clients_requests_are_not_logged_one_line_each(caplog):
    """httpx logged two INFO lines every two seconds in `make run` (the health and load polls), burying
    the e-mail verification link printed to the same console (issue 25)."""
    with httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200))) as client:
        client.get("http://127.0.0.1:30000/health")
        client.get("http://127.0.0.1:30000/metrics")
    assert not [r for r in caplog.records if r.name.startswith(("httpx", "httpcore"))]
