"""What the security browser tests watch for on every page: Content-Security-Policy violations, script
that ran when it should not have, dialogs, and requests to an attacker's host.

`Watch` is attached to a browser context before any page opens:

- an init script (it runs in every frame before the page's own scripts) listens for the browser's
  `securitypolicyviolation` events and defines the XSS sentinel `__xss(id)`; hostile markup in the
  tests calls it, and it is also what `alert`, `confirm`, `prompt` and `print` call;
- both are reported to Python through an exposed binding, so a record survives the page navigating
  away, and are kept in the page too (`window.__watch`) as a second source;
- Chromium's console lines about the policy ("Refused to ... Content Security Policy") count as
  violations as well;
- every request of the context is checked against ATTACKER_HOST, and dialogs are recorded and dismissed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from playwright.sync_api import BrowserContext, Page

ATTACKER_HOST = "attacker.invalid"

INIT_SCRIPT = """
(() => {
  const report = (kind, detail) => {
    const record = { kind, detail, url: location.href };
    (window.__watch = window.__watch || []).push(record);
    try { window.__watchReport(record); } catch (e) {}
  };
  document.addEventListener("securitypolicyviolation", (e) => report("csp", {
    directive: e.effectiveDirective, blocked: e.blockedURI, sample: e.sample, source: e.sourceFile, line: e.lineNumber,
  }), true);
  const sentinel = (id) => { report("xss", String(id)); };
  Object.defineProperty(window, "__xss", { value: sentinel, writable: false, configurable: false });
  for (const name of ["alert", "confirm", "prompt", "print"]) {
    const original = window[name];
    window[name] = function (...args) { report("xss", `${name}(${args.map(String).join(",")})`); return original && null; };
  }
})();
"""


SANITIZER_MODULE = "/static/vendor/dompurify/purify.es.mjs"


def is_sanitizer_parse_report(violation: dict) -> bool:
    detail = violation["detail"]
    return detail["directive"] == "script-src-attr" and (detail["source"] or "").split("?")[0].endswith(
        SANITIZER_MODULE
    )


@dataclass
class Watch:
    context: BrowserContext
    violations: list[dict] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    attacker_requests: list[str] = field(default_factory=list)
    console_policy_lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.context.expose_binding("__watchReport", self._on_report)
        self.context.add_init_script(INIT_SCRIPT)
        self.context.on("request", self._on_request)
        self.context.on("page", self._attach)
        # Never wait on DNS for the attacker's host: the request is recorded above, then refused.
        self.context.route(f"**://{ATTACKER_HOST}/**", lambda route: route.abort())
        self.context.route(f"**://*.{ATTACKER_HOST}/**", lambda route: route.abort())

    def _on_report(self, source, record: dict) -> None:
        if record["kind"] == "csp":
            self.violations.append(record)
        else:
            self.scripts.append(record["detail"])

    def _on_request(self, request) -> None:
        host = urlsplit(request.url).hostname or ""
        if host == ATTACKER_HOST or host.endswith("." + ATTACKER_HOST):
            self.attacker_requests.append(request.url)

    def _attach(self, page: Page) -> None:
        self.pages.append(page)
        page.on("dialog", self._on_dialog)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", self._on_console)

    def _on_dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def _on_console(self, message) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            source = (message.location or {}).get("url", "")
            self.console_policy_lines.append(f"{source}: {message.text}")

    def new_page(self) -> Page:
        page = self.context.new_page()
        if page not in self.pages:
            self._attach(page)
        return page

    def flush(self) -> None:
        """Let bindings called so far reach Python, and read what each open page kept itself."""
        for page in self.pages:
            if page.is_closed():
                continue
            try:
                kept = page.evaluate("() => JSON.stringify(window.__watch || [])")
            except Exception:  # a page in the middle of navigating: its records came through the binding
                continue
            for record in json.loads(kept):
                target = self.violations if record["kind"] == "csp" else self.scripts
                value = record if record["kind"] == "csp" else record["detail"]
                if value not in target:
                    target.append(value)

    def problems(self, *, sanitizer_parse_reports_allowed: bool = False) -> dict[str, list]:
        """Everything that went wrong so far; empty lists when the page behaved.

        `sanitizer_parse_reports_allowed`: Chromium reports an inline event handler in markup that
        DOMPurify parses with DOMParser, in a document that has no window and never runs anything
        (cure53/DOMPurify#107). Hostile markup in a model's answer causes such reports; they are not a
        handler that ran, nor one that would have run without the policy (see test_xss.py).
        """
        self.flush()
        violations = self.violations
        console = self.console_policy_lines
        if sanitizer_parse_reports_allowed:
            violations = [v for v in violations if not is_sanitizer_parse_report(v)]
            console = [
                line for line in console if not (SANITIZER_MODULE in line.split(": ", 1)[0] and "event handler" in line)
            ]
        return {
            "csp_violations": violations,
            "csp_console_lines": console,
            "scripts_that_ran": self.scripts,
            "dialogs": self.dialogs,
            "attacker_requests": self.attacker_requests,
            "page_errors": self.errors,
        }

    def assert_clean(self, where: str = "") -> None:
        problems = {name: found for name, found in self.problems().items() if found}
        assert not problems, f"{where}: {problems}"
