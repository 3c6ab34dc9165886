"""A real nginx (Debian's package) in front of Daphne processes, on loopback, for tests.

The server blocks include the product's own proxy rules from deploy/nginx/ (the files
deploy/nginx.conf includes), so a test exercises the configuration operators deploy. Each upstream
group gets a port of its own, so a test decides which Daphne process a request reaches by the
port it uses, rather than hoping round robin lands where it needs; every response says which
process served it in `X-SGLChat-Upstream` (nginx's $upstream_addr), added by the test's server
blocks only.

Everything nginx writes (pid file, temporary files, logs) stays in the directory it is given
(pytest's tmp_path). As an ordinary user nginx runs as that user; as root (CI, a fresh container)
the master process is root, as a packaged nginx's is, and its workers, which serve every request,
run as `nobody`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.engines import accepts, free_port

ROOT = Path(__file__).resolve().parents[2]
PROXY_RULES = ROOT / "deploy" / "nginx"
#: The response header that names the Daphne process which answered (host:port).
UPSTREAM_HEADER = "X-SGLChat-Upstream"


class NginxMissing(RuntimeError):
    pass


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if not found:
        raise NginxMissing(
            "These tests need Debian's nginx: scripts/ensure-test-deps installs it "
            "(or: sudo apt-get install nginx-light)."
        )
    return found


@dataclass
class Entrance:
    """One port of the proxy, reaching one upstream group; quacks like LiveServer for ChatClient."""

    base_url: str

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://")


@dataclass
class Nginx:
    process: subprocess.Popen
    root: Path
    entrances: dict[str, Entrance]

    def __getitem__(self, upstream: str) -> Entrance:
        return self.entrances[upstream]

    def error_log(self) -> str:
        path = self.root / "logs" / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # nginx's fast shutdown: master and workers
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _config(root: Path, ports: dict[str, int], upstreams: dict[str, list[str]]) -> str:
    groups = "\n".join(
        f"    upstream {name} {{\n"
        + "".join(f"        server {address};\n" for address in addresses)
        + "        keepalive 8;\n    }"
        for name, addresses in upstreams.items()
    )
    servers = "\n".join(
        f"""    server {{
        listen 127.0.0.1:{ports[name]};
        set $sglchat_upstream {name};
        add_header {UPSTREAM_HEADER} $upstream_addr always;
        include {root}/sglchat/sglchat-locations.conf;
    }}"""
        for name in upstreams
    )
    user = "user nobody nogroup;\n" if os.geteuid() == 0 else ""
    temp = root / "temp"
    return f"""{user}worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/logs/error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log {root}/logs/access.log;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    # Workers may be `nobody` (see the module's docstring) and cannot reach pytest's private
    # directory: keep bodies and responses in memory rather than in temporary files.
    client_body_buffer_size 4m;
    proxy_max_temp_file_size 0;
    include {root}/sglchat/sglchat-http.conf;
{groups}
{servers}
}}
"""


def start_nginx(root: Path, upstreams: dict[str, list[str]], *, timeout: float = 20) -> Nginx:
    """nginx with one port per upstream group ({name: ["127.0.0.1:port", ...]}), ready when all listen."""
    binary = nginx_binary()
    for sub in ("logs", "temp", "sglchat"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rules in PROXY_RULES.glob("*.conf"):
        shutil.copy(rules, root / "sglchat" / rules.name)
    ports = {name: free_port() for name in upstreams}
    config = root / "nginx.conf"
    config.write_text(_config(root, ports, upstreams))
    argv = [binary, "-p", f"{root}/", "-c", str(config), "-e", str(root / "logs" / "error.log")]
    checked = subprocess.run([*argv, "-t", "-q"], capture_output=True, text=True, check=False)
    if checked.returncode != 0:
        raise RuntimeError(f"nginx refused its configuration:\n{checked.stderr}\n{config.read_text()}")
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    nginx = Nginx(process, root, {name: Entrance(f"http://127.0.0.1:{port}") for name, port in ports.items()})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited with {process.returncode}:\n{nginx.error_log()}")
        if all(accepts(port) for port in ports.values()):
            return nginx
        time.sleep(0.05)
    nginx.stop()
    raise RuntimeError(f"nginx did not listen within {timeout}s:\n{nginx.error_log()}")
