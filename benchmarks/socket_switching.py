"""Switching through the control socket of ``sbrs run``, as a client sees it; and a long request burst.

Delay (default): starts ``sbrs run APP`` with its JSON lines on a pipe, sends ``switch`` requests
over the control socket at random moments (a different scenario each time) and measures, on the client's
clock, the time from sending the request line to reading the first JSON line of the new scenario (the line
carrying the switch record). Beside it: the runtime's own record of that switch (``response_delay_s``: from the
request reaching the control node to the new output), and the reply time of the request. Prints mean and p95.

Burst (``--burst SECONDS``): ``--clients`` clients send switch/env/status requests back to back (bounded by
time) while the runner writes frames; at the end every request must have had a reply, the runner must still
be alive and answer ``status``, and it must stop cleanly on SIGTERM. Its RSS is sampled every second.

    python benchmarks/socket_switching.py apps/tiny.yaml [--requests 200] [--json]
    python benchmarks/socket_switching.py apps/drone.yaml --burst 600 --clients 8 [--on-switch cancel]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sbrs.server.client import Connection

START_TIMEOUT_S = 120.0


class Runner:
    """``sbrs run`` in a child process; a thread reads its JSON lines and notes when each arrived."""

    def __init__(self, app: str, socket_path: str, extra: list[str]) -> None:
        command = [sys.executable, "-m", "sbrs.cli", "run", app, "--socket", socket_path, *extra]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.condition = threading.Condition()
        self.frames = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr: list[bytes] = []
        threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"sbrs run did not start: {b''.join(self._stderr).decode(errors='replace')}")
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            now = time.perf_counter()
            self.frames += 1
            if b'"switch"' in raw:  # only switch lines are parsed: the reader must keep up with the runner
                line = json.loads(raw)
                with self.condition:
                    self.lines.append((now, line))
                    self.condition.notify_all()

    def wait_switch_to(self, scenario: str, after: float, timeout: float = 10.0) -> tuple[float, dict[str, Any]]:
        """The first switch line to ``scenario`` read after ``after`` (perf_counter)."""
        deadline = time.perf_counter() + timeout
        with self.condition:
            while True:
                for when, line in self.lines:
                    if when >= after and line["switch"]["new"] == scenario:
                        self.lines.clear()
                        return when, line
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise SystemExit(f"no switch to {scenario} within {timeout} s")
                self.condition.wait(remaining)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            self._reader.join(timeout=5)

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"mean_ms": round(statistics.fmean(ordered) * 1e3, 4),
            "p95_ms": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1e3, 4),
            "max_ms": round(ordered[-1] * 1e3, 4), "first_ms": round(values[0] * 1e3, 4)}


def measure_delay(app: str, requests: int, seed: int, extra: list[str]) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="sbrs-bench-") as folder:
        path = os.path.join(folder, "control.sock")
        runner = Runner(app, path, extra)
        try:
            with Connection(path) as connection:
                scenarios = connection.request({"op": "status"})["scenarios"]
                current = connection.request({"op": "status"})["scenario"]
                client, recorded, reply = [], [], []
                time.sleep(0.5)  # warm up
                for _ in range(requests):
                    target = rng.choice([s for s in scenarios if s != current])
                    time.sleep(rng.uniform(0.002, 0.02))
                    sent = time.perf_counter()
                    answer = connection.request({"op": "switch", "scenario": target})
                    reply.append(time.perf_counter() - sent)
                    if not answer.get("ok"):
                        raise SystemExit(f"switch refused: {answer}")
                    when, line = runner.wait_switch_to(target, sent)
                    client.append(when - sent)
                    recorded.append(line["switch"]["response_delay_s"])
                    current = target
        finally:
            code = runner.stop()
    return {"app": app, "requests": requests, "client_delay": summary(client), "runtime_record": summary(recorded),
            "reply": summary(reply), "runner_exit": code}


def burst(app: str, seconds: float, clients: int, seed: int, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sbrs-burst-") as folder:
        path = os.path.join(folder, "control.sock")
        runner = Runner(app, path, extra)
        sent = answered = errors = 0
        lock = threading.Lock()
        end = time.perf_counter() + seconds
        failures: list[str] = []

        def client(number: int) -> None:
            nonlocal sent, answered, errors
            rng = random.Random(seed + number)
            try:
                with Connection(path, timeout=30) as connection:
                    scenarios = connection.request({"op": "status"})["scenarios"]
                    while time.perf_counter() < end:
                        kind = rng.random()
                        if kind < 0.7:
                            request: dict[str, Any] = {"op": "switch", "scenario": rng.choice(scenarios)}
                        elif kind < 0.85:
                            request = {"op": "env", "battery": round(rng.random(), 3)}
                        else:
                            request = {"op": "status"}
                        with lock:
                            sent += 1
                        reply = connection.request(request)
                        with lock:
                            answered += 1
                            errors += 0 if reply.get("ok") else 1
            except Exception as exc:  # reported below: a lost connection is a failure of the run
                failures.append(f"client {number}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        rss: list[int] = []
        while any(thread.is_alive() for thread in threads):
            rss.append(runner.rss_bytes())
            time.sleep(1.0)
        for thread in threads:
            thread.join()
        alive = runner.process.poll() is None
        with Connection(path) as connection:
            status = connection.request({"op": "status"})
        frames = runner.frames
        code = runner.stop()
    warm = rss[len(rss) // 10:] or rss
    return {"app": app, "seconds": seconds, "clients": clients, "requests_sent": sent, "replies": answered,
            "error_replies": errors, "client_failures": failures, "runner_alive_at_end": alive,
            "status_ok": bool(status.get("ok")), "switches_asked": status.get("switches_asked"), "frames": frames,
            "runner_exit": code, "rss_mb_first_last_max": [round(warm[0] / 1e6, 2), round(warm[-1] / 1e6, 2),
                                                            round(max(warm) / 1e6, 2)] if warm else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("app")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--burst", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--on-switch", choices=("finish", "cancel"), default=None,
                        help="passed to sbrs run (default: the app's runtime.on_switch)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    extra = [] if args.on_switch is None else ["--on-switch", args.on_switch]
    app = str(Path(args.app).resolve())
    if args.burst is not None:
        report = burst(app, args.burst, args.clients, args.seed, extra)
        ok = (report["requests_sent"] == report["replies"] and not report["client_failures"]
              and report["runner_alive_at_end"] and report["runner_exit"] == 0)
    else:
        report = measure_delay(app, args.requests, args.seed, extra)
        ok = report["runner_exit"] == 0
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
