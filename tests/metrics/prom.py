"""Helpers of the metrics tests: free loopback ports, HTTP GETs, and a throw-away Prometheus server.

``PrometheusServer`` runs the real ``prometheus`` binary against one scrape target with a 1 s scrape interval,
on a free loopback port, with its TSDB in a temporary folder; it stops (terminate, then kill) when the ``with``
block ends. Nothing here relies on a system service: every process is started and stopped by the test.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
DEADLINE_S = 60.0

T = TypeVar("T")

requires_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="the prometheus binary is not on PATH (Debian: apt-get install prometheus; .ci/run installs it on CI)")
requires_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not on PATH (Debian: apt-get install prometheus; .ci/run installs it on CI)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """Status and body of a GET (no proxies: everything here is on loopback)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as response:
        return int(response.status), response.read().decode()


def wait_for(condition: Callable[[], T | None], deadline: float, what: str,
             describe: Callable[[], str] = lambda: "") -> T:
    """Poll ``condition`` every 0.2 s until it returns a truthy value; fail naming ``what`` at ``deadline``."""
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (OSError, ValueError, KeyError) as exc:  # not up yet, or not scraped yet
            last_error, value = exc, None
        if value:
            return value
        time.sleep(0.2)
    detail = describe()
    pytest.fail(f"timed out waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
                + (f"\n{detail}" if detail else ""))


class PrometheusServer:
    """A ``prometheus`` process scraping ``target`` (host:port) every second, loading ``rule_files``."""

    def __init__(self, workdir: Path, target: str, rule_files: tuple[Path, ...] = ()) -> None:
        self.workdir = workdir
        self.target = target
        self.rule_files = rule_files
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        rules = "".join(f"  - {json.dumps(str(path))}\n" for path in self.rule_files)
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n  - job_name: sbrs\n    static_configs:\n"
            + f"      - targets: [{json.dumps(self.target)}]\n")
        deadline = time.monotonic() + 20.0
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            self.port = free_port()
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    if http_get(f"{self.base}/-/ready", timeout=1.0)[0] == 200:
                        return self
                except OSError:
                    pass
                time.sleep(0.2)
            if self.process.poll() is None:
                break
        self._stop()
        pytest.fail(f"prometheus did not become ready\n{self.log_tail()}")

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop()
        shutil.rmtree(self.workdir / "tsdb", ignore_errors=True)  # the bulk; the log stays with pytest's tmp_path

    def _stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``; the ``data`` of a successful answer (ValueError otherwise)."""
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.base}/api/v1/{path}" + (f"?{query}" if query else ""))
        answer = json.loads(body)
        if status != 200 or answer.get("status") != "success":
            raise ValueError(f"{path}: {body[:300]}")
        return answer["data"]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query: (labels, value) of every series of the result vector."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise ValueError(f"{expr}: expected a vector, got {data['resultType']}")
        return [(item["metric"], float(item["value"][1])) for item in data["result"]]

    def value(self, expr: str) -> float | None:
        """The value of a query that yields one series, else None."""
        result = self.query(expr)
        return result[0][1] if len(result) == 1 else None
