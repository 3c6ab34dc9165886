"""deploy/: the compose file, nginx.conf and Prometheus's targets agree with each other, the GPU nodes
run with the recommended SGLang flags, every process sends its traces to the compose file's Jaeger, and
nginx accepts deploy/nginx.conf as written.

Docker itself cannot run here (no engine on the project's machines), so what can be checked without
it is checked: the files' own consistency, and nginx's verdict on its configuration (`nginx -t`,
with the container's host names and certificate paths pointed at loopback and a throwaway
certificate).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from harness.engines import free_port
from tests.support.nginx import nginx_binary

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RECOMMENDED_SGLANG_FLAGS = (
    "--enable-metrics",
    "--enable-cache-report",
    "--enable-priority-scheduling",
    "--radix-eviction-policy=priority",
    "--incremental-streaming-output",
    "--max-queued-requests",
    "--enable-hierarchical-cache",
    "--hicache-ratio",
)


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def services_named(prefix: str) -> list[str]:
    return sorted(name for name in compose()["services"] if re.fullmatch(rf"{prefix}-\d+", name))


def test_nginx_balances_exactly_the_daphne_services_of_the_compose_file():
    upstream = re.search(r"upstream daphne \{(.*?)\}", (DEPLOY / "nginx.conf").read_text(), re.S).group(1)
    servers = re.findall(r"^\s*server\s+([\w-]+):8000\b", upstream, re.M)
    assert servers == services_named("daphne")
    assert len(servers) >= 2


def test_every_daphne_process_runs_behind_the_proxy_as_tested():
    for name in services_named("daphne"):
        command = compose()["services"][name]["command"]
        assert "--proxy-headers" in command  # the client's address from nginx's X-Forwarded-For
        # Twisted listens with a backlog of 50 unless told: a burst of connections beyond it is dropped
        # by the kernel, and nginx would answer those clients 502.
        assert "tcp:port=8000:interface=0.0.0.0:backlog=1024" in command
        assert command[-1] == "config.asgi:application"


def test_every_command_that_serves_the_product_runs_daphne_through_config_server():
    """config/server.py is Daphne that keeps no body past REQUEST_MAX_BYTES and sends no Server header;
    plain `daphne` would do neither. The compose file, the image, `make run`, the tests' and the
    benchmarks' servers all start it."""
    for name in services_named("daphne"):
        assert compose()["services"][name]["command"][:3] == ["python", "-m", "config.server"], name
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r'^CMD \["python", "-m", "config.server", ', dockerfile, re.M), "deploy/Dockerfile"
    root = DEPLOY.parent
    for path in ("scripts/run-embedded", "tests/support/servers.py", "bench/procs.py"):
        text = (root / path).read_text()
        assert '"-m", "config.server"' in text and '"-m", "daphne"' not in text, path


def test_each_daphne_process_is_healthy_only_when_ready():
    """Docker's health check asks /readyz (the database, Redis and an engine up), not /healthz, which
    only says the process answers."""
    for name in services_named("daphne"):
        check = " ".join(compose()["services"][name]["healthcheck"]["test"])
        assert "http://127.0.0.1:8000/readyz" in check, name
    nginx = (DEPLOY / "nginx.conf").read_text()
    assert re.search(r"location ~ \^/\(healthz\|readyz\)\$", nginx), "the load balancer's checks on port 80"


def test_prometheus_scrapes_every_daphne_process_and_every_gpu_node():
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {name: [t for sc in job["static_configs"] for t in sc["targets"]] for name, job in jobs.items()}
    assert targets["sglchat"] == [f"{name}:8000" for name in services_named("daphne")]
    assert targets["sglang"] == [f"{name}:30000" for name in services_named("sglang")]
    assert jobs["sglchat"]["authorization"]["credentials_file"]  # /metrics is never public
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]


def test_the_product_knows_every_gpu_node_and_each_runs_the_recommended_flags():
    services = compose()["services"]
    nodes = services["daphne-1"]["environment"]["INFERENCE_NODES"]
    urls = sorted(item.partition("=")[2] for item in nodes.split(","))
    assert urls == [f"http://{name}:30000" for name in services_named("sglang")]
    for name in services_named("sglang"):
        command = services[name]["command"]
        assert command[:3] == ["python3", "-m", "sglang.launch_server"]
        for flag in RECOMMENDED_SGLANG_FLAGS:
            assert any(arg == flag or arg.startswith(flag + "=") for arg in command), (name, flag)


def test_the_simulated_worker_of_make_run_evicts_by_priority_as_the_gpu_nodes_do():
    """The simulated worker of `make run` evicts its radix cache by priority, as the compose file's
    SGLang nodes do, so a paid conversation's prefix outlives free traffic there too."""
    script = (DEPLOY.parent / "scripts" / "run-embedded").read_text()
    worker = re.search(r'\[PYTHON, "-m", "simulator",(.*?)\]', script, re.S).group(1)
    assert '"--enable-priority-scheduling"' in worker
    assert '"--radix-eviction-policy", "priority"' in worker


def test_the_simulated_worker_of_make_run_streams_incrementally_as_the_gpu_nodes_do():
    script = (DEPLOY.parent / "scripts" / "run-embedded").read_text()
    worker = re.search(r'\[PYTHON, "-m", "simulator",(.*?)\]', script, re.S).group(1)
    assert '"--incremental-streaming-output"' in worker


def test_nginx_accepts_the_deployed_configuration(tmp_path):
    shutil.copytree(DEPLOY / "nginx", tmp_path / "sglchat")
    (tmp_path / "certs").mkdir()
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(tmp_path / "certs" / "privkey.pem"),
            "-out",
            str(tmp_path / "certs" / "fullchain.pem"),
        ],
        check=True,
        capture_output=True,
    )
    config = (DEPLOY / "nginx.conf").read_text()
    config = re.sub(r"\bdaphne-\d+:8000\b", lambda _: f"127.0.0.1:{free_port()}", config)
    config = config.replace("/etc/nginx/sglchat/", f"{tmp_path}/sglchat/").replace(
        "/etc/nginx/certs/", f"{tmp_path}/certs/"
    )
    config = config.replace("pid /tmp/nginx.pid;", f"pid {tmp_path}/nginx.pid;")
    config = re.sub(r"listen (80|443)\b", lambda _: f"listen 127.0.0.1:{free_port()}", config)
    (tmp_path / "nginx.conf").write_text(config)

    checked = subprocess.run(
        [
            nginx_binary(),
            "-t",
            "-p",
            f"{tmp_path}/",
            "-c",
            str(tmp_path / "nginx.conf"),
            "-e",
            str(tmp_path / "error.log"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert "test is successful" in checked.stderr


# Tracing: the product's processes, the GPU nodes and the gateway all send their spans to the compose
# file's Jaeger, and the staff console links each answer's trace to Jaeger's UI.

TRACE_BACKEND = "jaeger"
#: Services whose processes export spans, with the OTLP protocol each speaks: the product's Python
#: (config/tracing.py) over HTTP, smg's Rust exporter over gRPC.
TRACED_PRODUCT_SERVICES = {"celery-worker": "http", "celery-beat": "http", "smg": "grpc"}


def compose_default(value: str) -> str:
    """`value` as compose resolves it with nothing set in .env: each ${VAR-default} or ${VAR:-default}
    becomes its default."""
    return re.sub(r"\$\{\w+:?-([^}]*)\}", r"\1", value)


def trace_backend_ports() -> dict[str, int]:
    """The OTLP ports the trace backend receives on, by protocol."""
    service = compose()["services"][TRACE_BACKEND]
    exposed = {int(port) for port in service["expose"]}
    assert exposed == {4317, 4318}, exposed  # Jaeger's OTLP receivers: gRPC and HTTP
    return {"grpc": 4317, "http": 4318}


def code_service_name(path: str) -> str:
    """The service name config/tracing.py's `set_up` is given in `path`, the code's default."""
    names = set(re.findall(r'set_up\("([\w-]+)"\)', (DEPLOY.parent / path).read_text()))
    assert len(names) == 1, (path, names)
    return names.pop()


def test_the_trace_backend_receives_otlp_inside_the_network_and_shows_its_ui_on_loopback_only():
    service = compose()["services"][TRACE_BACKEND]
    assert re.fullmatch(r"jaegertracing/jaeger:2\.\d+\.\d+", service["image"]), "Jaeger v2, a pinned release"
    trace_backend_ports()
    # Nothing but the UI leaves the host's loopback: OTLP comes only from the compose network.
    assert service["ports"] == ["127.0.0.1:16686:16686"]
    # The all-in-one configuration built into the image (no --config), its in-memory store bounded.
    assert not any(arg.startswith("--config") for arg in service.get("command", []))
    assert any(
        re.fullmatch(r"--set=extensions\.jaeger_storage\.backends\.some_storage\.memory\.max_traces=\d+", arg)
        for arg in service["command"]
    )


def test_every_process_of_the_product_exports_its_spans_to_the_trace_backend_under_its_name():
    services = compose()["services"]
    ports = trace_backend_ports()
    traced = {name: "http" for name in services_named("daphne")} | TRACED_PRODUCT_SERVICES
    expected_names = {name: code_service_name("config/asgi.py") for name in services_named("daphne")} | {
        "celery-worker": code_service_name("config/celery.py"),
        "celery-beat": code_service_name("config/celery.py"),
        "smg": "smg",
    }
    assert expected_names["daphne-1"] == "sglchat-web" and expected_names["celery-worker"] == "sglchat-worker"
    for name, protocol in traced.items():
        environment = services[name]["environment"]
        endpoint = compose_default(environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert endpoint == f"http://{TRACE_BACKEND}:{ports[protocol]}", (name, endpoint)
        assert environment["OTEL_SERVICE_NAME"] == expected_names[name], name


def test_the_product_can_turn_its_tracing_off_or_elsewhere_from_env():
    """${VAR-default}, not ${VAR:-default}: an empty OTEL_EXPORTER_OTLP_ENDPOINT in .env reaches the
    processes empty, which turns tracing off (config/settings.py TRACING), instead of Jaeger's URL."""
    value = compose()["services"]["daphne-1"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert value == "${OTEL_EXPORTER_OTLP_ENDPOINT-http://jaeger:4318}"


def test_the_console_links_each_trace_to_the_ui_the_trace_backend_publishes():
    services = compose()["services"]
    published = services[TRACE_BACKEND]["ports"][0]
    host_address, host_port, container_port = published.rsplit(":", 2)
    assert container_port == "16686"  # Jaeger's UI and query API
    for name in [*services_named("daphne"), "celery-worker", "celery-beat"]:
        raw = services[name]["environment"]["TRACE_URL_TEMPLATE"]
        # Only the base is interpolated: compose would cut a ${...:-default} at the first "}" of "{trace_id}".
        assert raw.endswith("}/trace/{trace_id}") and raw.count("{trace_id}") == 1, raw
        template = compose_default(raw)
        assert template == f"http://localhost:{host_port}/trace/{{trace_id}}", (name, template)
        assert host_address == "127.0.0.1"  # localhost in the browser: through the SSH tunnel, as Grafana


def test_every_gpu_node_traces_its_requests_to_the_trace_backend_in_the_products_traces():
    services = compose()["services"]
    ports = trace_backend_ports()
    for name in services_named("sglang"):
        command = services[name]["command"]
        assert "--enable-trace" in command, name
        # SGLang's exporter speaks gRPC unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says otherwise, to a
        # host:port without a scheme.
        endpoints = [arg.partition("=")[2] for arg in command if arg.startswith("--otlp-traces-endpoint=")]
        assert endpoints == [f"{TRACE_BACKEND}:{ports['grpc']}"], (name, endpoints)
        environment = services[name]["environment"]
        assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in environment, name
        # Joins the product's traces and starts none of its own; no span per generated token.
        assert environment["OTEL_TRACES_SAMPLER"] == "parentbased_always_off", name
        assert int(environment["SGLANG_TRACE_LEVEL"]) <= 2, name


def test_the_gateway_traces_to_the_trace_backend_with_flags_it_accepts():
    from sglang_router.launch_router import parse_router_args

    smg = compose()["services"]["smg"]
    command = smg["command"]
    assert command[:2] == ["smg", "launch"]
    args = parse_router_args(command[2:])  # the installed gateway's own parser: an unknown flag fails here
    assert args.enable_trace
    assert args.otlp_traces_endpoint == f"{TRACE_BACKEND}:{trace_backend_ports()['grpc']}"
    # Its exporter reads OTEL_EXPORTER_OTLP_ENDPOINT too (before the flag, in some versions): the same place.
    assert smg["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{args.otlp_traces_endpoint}"
    # Like the nodes, it joins the product's traces and starts none of its own.
    assert smg["environment"]["OTEL_TRACES_SAMPLER"] == "parentbased_always_off"
