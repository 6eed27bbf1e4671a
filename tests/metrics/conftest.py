"""Fixtures of the metrics tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sbrs.metrics import MetricsObserver, MetricsServer, start_metrics_server

SCENARIOS = ("full", "skip", "exit")


@pytest.fixture
def observer() -> MetricsObserver:
    """An observer of a three-scenario app whose policy marks ``full`` high-power (its own registry)."""
    return MetricsObserver(SCENARIOS, initial="full", high_power=("full",), providers=("CPUExecutionProvider",))


@pytest.fixture
def metrics_server(observer: MetricsObserver) -> Iterator[MetricsServer]:
    """``observer``'s registry served on a free loopback port."""
    server = start_metrics_server(observer.registry, 0)
    try:
        yield server
    finally:
        server.stop()
