"""A small live run for tests/test_temp_files.py, which runs it in a pytest of its own with a fresh
system temporary directory and checks what is left there. Not collected by the suite (the name does
not start with test_): it starts every kind of process the suite starts that writes files, and
drives them once.
"""

from playwright.sync_api import sync_playwright

from harness.engines import start_gateway, start_simulator
from tests.support.servers import start_daphne

CHROMIUM = "/usr/bin/chromium"


def test_every_kind_of_process_runs_and_writes(transactional_db, tmp_path):
    with (
        start_simulator("--accept-any-model") as worker,
        start_gateway([worker.url]) as gateway,
    ):
        server = start_daphne(engine_url=gateway.url)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
                page = browser.new_page()
                page.goto(server.base_url + "/")
                assert page.title()
                browser.close()
        finally:
            server.stop()
        assert worker.log_path.exists() and gateway.log_path.exists() and server.log_path.exists()
