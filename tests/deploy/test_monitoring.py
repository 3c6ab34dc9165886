"""The Grafana dashboard and the Prometheus alert rules in deploy/ name only metrics and labels that exist.

The product's come from config/metrics.py itself; SGLang's from a simulated worker's /metrics (the
simulator serves SGLang's names and labels, docs/inference.md); `up` is Prometheus's own. So a metric
renamed in the code, or a typo in a panel, fails here instead of leaving an empty chart or an alert
that can never fire. Grafana's provisioned data sources are the compose file's services, and the
dashboard's trace search asks for the web processes' service name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from config import metrics as product_metrics
from harness.engines import start_simulator
from tests.deploy.test_compose import compose, compose_default, services_named

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "sglchat.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "summary": ("_sum", "_count", "_created"),
}


def product_series() -> dict[str, set[str]]:
    """Every series name config/metrics.py can expose, with its labels."""
    series: dict[str, set[str]] = {}
    for metric in vars(product_metrics).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        labels = set(metric._labelnames)
        for family in metric.describe():
            for suffix in SUFFIXES[family.type]:
                series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return series


@pytest.fixture(scope="module")
def known_series() -> dict[str, set[str]]:
    worker = start_simulator("--enable-metrics")
    try:
        # One request, so the counters that appear only once counted are there too.
        httpx.post(
            f"{worker.url}/generate", json={"text": "Hello", "sampling_params": {"max_new_tokens": 4}}, timeout=30
        ).raise_for_status()
        text = httpx.get(f"{worker.url}/metrics", timeout=10).text
    finally:
        worker.stop()
    series = {"up": set()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    assert {"sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate"} <= series.keys()
    series.update(product_series())
    return {name: labels | TARGET_LABELS for name, labels in series.items()}


def problems(expr: str, known: dict[str, set[str]]) -> list[str]:
    """What in one PromQL expression names a metric or label that does not exist."""
    found = []
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values and strings say nothing about names
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations: [5m]
    used: list[str] = []
    for name, matchers in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", text):
        for label in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers):
            if name in known and label not in known[name]:
                found.append(f"{name} has no label {label!r}")
    text = re.sub(r"\{[^}]*\}", "", text)
    groupings = re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text)
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)
    for token, call in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", text):
        if call or token in KEYWORDS:
            continue  # a function, or a keyword
        used.append(token)
        if token not in known:
            found.append(f"no metric named {token!r}")
    labels_in_use = set().union(*(known.get(name, set()) for name in used)) if used else set()
    for grouping in groupings:
        for label in filter(None, (part.strip() for part in grouping.split(","))):
            if label not in labels_in_use:
                found.append(f"no metric of the expression has label {label!r}")
    if not used:
        found.append("names no metric at all")
    return found


def dashboard_exprs() -> list[tuple[str, str]]:
    """Every PromQL query of the dashboard (its Jaeger panel asks for traces, not metrics)."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
        if target["datasource"]["type"] == "prometheus"
    ]


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def test_the_checker_catches_a_misspelt_metric_a_missing_label_and_a_wrong_grouping(known_series):
    assert problems("sum(rate(sglchat_answer_total[5m]))", known_series) == ["no metric named 'sglchat_answer_total'"]
    assert problems('sum(rate(sglchat_answers_total{state="failed"}[5m]))', known_series) == [
        "sglchat_answers_total has no label 'state'"
    ]
    assert problems("sum by (node) (sglang:num_queue_reqs)", known_series) == [
        "no metric of the expression has label 'node'"
    ]
    assert (
        problems(
            "histogram_quantile(0.95, sum by (le) (rate(sglchat_time_to_first_token_seconds_bucket"
            '{source="chat"}[5m]))) > 2',
            known_series,
        )
        == []
    )


def test_every_dashboard_query_names_metrics_and_labels_that_exist(known_series):
    exprs = dashboard_exprs()
    assert len(exprs) >= 15
    wrong = {f"{title}: {expr}": found for title, expr in exprs if (found := problems(expr, known_series))}
    assert not wrong


def test_every_alert_names_metrics_and_labels_that_exist(known_series):
    rules = alert_rules()
    assert len(rules) >= 10
    wrong = {rule["alert"]: found for rule in rules if (found := problems(rule["expr"], known_series))}
    assert not wrong


def test_every_alert_is_complete_and_named_once():
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["labels"]["severity"] in {"page", "warn", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]


def test_the_dashboard_covers_what_staff_watch(known_series):
    """The figures issue 12 lists for the staff dashboard are on the Grafana one too."""
    exprs = " ".join(expr for _, expr in dashboard_exprs())
    for metric in (
        "sglchat_http_responses_total",
        "sglchat_answers_in_flight",
        "sglang:num_queue_reqs",
        "sglchat_time_to_first_token_seconds_bucket",
        "sglchat_tokens_total",
        "sglang:cache_hit_rate",
        "sglchat_moderation_verdicts_total",
        "sglang:token_usage",
        "sglang:num_running_reqs",
    ):
        assert metric in exprs, metric


def provisioned_datasources() -> dict[str, dict]:
    """Grafana's provisioned data sources by uid, each file checked as Grafana reads it."""
    found: dict[str, dict] = {}
    for path in sorted(DATASOURCES.glob("*.yaml")):
        provisioning = yaml.safe_load(path.read_text())
        assert provisioning["apiVersion"] == 1, path.name
        for source in provisioning["datasources"]:
            assert {"name", "uid", "type", "access", "url"} <= source.keys(), path.name
            assert source["access"] == "proxy", path.name  # Grafana's server reaches it inside the network
            assert source["uid"] not in found, f"{path.name}: uid {source['uid']} twice"
            found[source["uid"]] = source
    return found


def test_grafana_reaches_each_provisioned_data_source_at_a_service_and_port_of_the_compose_file():
    sources = provisioned_datasources()
    assert {source["type"] for source in sources.values()} == {"prometheus", "jaeger"}
    assert len({source["name"] for source in sources.values()}) == len(sources)
    assert [source["uid"] for source in sources.values() if source.get("isDefault")] == ["prometheus"]
    services = compose()["services"]
    # The port each image serves on inside the network: Prometheus's HTTP API, Jaeger's UI and query API.
    container_ports = {"prometheus": 9090, "jaeger": 16686}
    for source in sources.values():
        url = urlsplit(source["url"])
        assert url.scheme == "http" and url.hostname in services, source["url"]
        assert url.port == container_ports[url.hostname], source["url"]
    jaeger_ui = services["jaeger"]["ports"][0].rsplit(":", 1)[1]
    assert int(jaeger_ui) == container_ports["jaeger"]


def test_every_dashboard_panel_asks_a_provisioned_data_source():
    sources = provisioned_datasources()
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        for target in [panel, *panel["targets"]]:
            uid, kind = target["datasource"]["uid"], target["datasource"]["type"]
            assert uid in sources and sources[uid]["type"] == kind, (panel["title"], uid, kind)


def test_the_dashboard_finds_slow_answers_in_the_web_processes_traces():
    """Its Jaeger panel and link search the service name the compose file gives Daphne, for the
    `chat <model>` span (GenAI conventions: gen_ai.operation.name=chat) over a duration."""
    web = compose()["services"][services_named("daphne")[0]]["environment"]["OTEL_SERVICE_NAME"]
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [panel for panel in dashboard["panels"] if panel.get("datasource", {}).get("type") == "jaeger"]
    (query,) = panel["targets"]
    # Grafana's Jaeger query model: a search by service, logfmt tags, durations like Jaeger's ("20s").
    assert query["queryType"] == "search"
    assert query["service"] == web
    assert query["tags"] == "gen_ai.operation.name=chat"
    assert re.fullmatch(r"\d+(us|ms|s|m|h)", query["minDuration"])
    assert isinstance(query["limit"], int) and query["limit"] > 0

    (link,) = [link for link in dashboard["links"] if "16686" in link["url"]]
    url = urlsplit(link["url"])
    # The Jaeger UI as compose.yaml publishes it, where the console's links go too.
    ui = compose_default(compose()["services"]["daphne-1"]["environment"]["TRACE_URL_TEMPLATE"])
    assert ui.startswith(f"{url.scheme}://{url.netloc}/")
    assert url.path == "/search"
    params = {key: values[0] for key, values in parse_qs(url.query).items()}
    assert params["service"] == web
    assert json.loads(params["tags"]) == {"gen_ai.operation.name": "chat"}
    assert params["minDuration"] == query["minDuration"]
