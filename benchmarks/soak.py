"""Soak test of ``sbrs run`` (not run by CI): a paced client loop of switch/env/status requests for a long
time, sampling the runner's RSS, threads and open file descriptors.

    python benchmarks/soak.py apps/drone.yaml --seconds 600 --interval 0.05

Prints one JSON object: requests sent and answered, error replies, samples of RSS (MB), threads and file
descriptors (first after warm-up, last, max), RSS growth after warm-up (the first tenth of the run), and the
runner's exit status after SIGTERM. Exit status 0 when every request was answered, the runner lived to the end
and stopped cleanly; the caller judges the growth (issue 14 asks for < 0.5 MB over 10 minutes at 50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from socket_switching import Runner  # a sibling script

from sbrs.server.client import Connection


def sample(pid: int) -> tuple[int, int, int]:
    """(RSS bytes, threads, open file descriptors) of process ``pid`` from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return int(fields["VmRSS"][0]) * 1024, int(fields["Threads"][0]), len(os.listdir(f"/proc/{pid}/fd"))


def soak(app: str, seconds: float, interval: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="sbrs-soak-") as folder:
        path = os.path.join(folder, "control.sock")
        runner = Runner(app, path, [])
        sent = answered = errors = 0
        samples: list[tuple[float, int, int, int]] = []
        started = time.monotonic()
        next_sample = started
        with Connection(path, timeout=30) as connection:
            scenarios = connection.request({"op": "status"})["scenarios"]
            deadline = started + seconds
            while (now := time.monotonic()) < deadline:
                kind = rng.random()
                if kind < 0.6:
                    request: dict[str, Any] = {"op": "switch", "scenario": rng.choice(scenarios)}
                elif kind < 0.8:
                    request = {"op": "env", "battery": round(rng.random(), 3), "min_fps": rng.choice([None, 5, 30])}
                else:
                    request = {"op": "status"}
                sent += 1
                reply = connection.request(request)
                answered += 1
                errors += 0 if reply.get("ok") else 1
                if now >= next_sample:
                    samples.append((now - started, *sample(runner.process.pid)))
                    next_sample = now + 1.0
                time.sleep(max(0.0, interval - (time.monotonic() - now)))
        alive = runner.process.poll() is None
        code = runner.stop()
    warm = [s for s in samples if s[0] >= seconds / 10] or samples
    column = {name: [s[index] for s in warm] for index, name in ((1, "rss"), (2, "threads"), (3, "fds"))}
    return {"app": app, "seconds": seconds, "interval_s": interval, "requests_sent": sent, "replies": answered,
            "error_replies": errors, "runner_alive_at_end": alive, "runner_exit": code,
            "rss_mb_first_last_max": [round(column["rss"][0] / 1e6, 3), round(column["rss"][-1] / 1e6, 3),
                                      round(max(column["rss"]) / 1e6, 3)],
            "rss_growth_after_warmup_mb": round((column["rss"][-1] - column["rss"][0]) / 1e6, 3),
            "threads_first_last_max": [column["threads"][0], column["threads"][-1], max(column["threads"])],
            "fds_first_last_max": [column["fds"][0], column["fds"][-1], max(column["fds"])]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("app")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report = soak(str(Path(args.app).resolve()), args.seconds, args.interval, args.seed)
    print(json.dumps(report, indent=2))
    ok = report["requests_sent"] == report["replies"] and report["runner_alive_at_end"] and report["runner_exit"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
