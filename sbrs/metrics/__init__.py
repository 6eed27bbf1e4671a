"""Prometheus metrics of a running app: an observer of run events, the ``/metrics`` server, CLI wiring.

``MetricsObserver`` implements ``sbrs.runtime.events.RunObserver`` on its own ``CollectorRegistry``;
``start_metrics_server`` serves a registry over HTTP (loopback unless allowed otherwise); ``cli_arguments``
and ``metrics_from_args`` give ``sbrs run`` its ``--metrics-*`` options. Metric names are listed in
``sbrs.metrics.observer``; Prometheus and Grafana files are in ``monitoring/``.
"""

from __future__ import annotations

from typing import Any

# prometheus_client is imported on first use of a name below, so `sbrs run` without metrics never loads it.
_SOURCES = {"cli_arguments": "cli", "metrics_from_args": "cli", "MetricsObserver": "observer",
            "DEFAULT_ADDRESS": "server", "DEFAULT_PORT": "server", "MetricsServer": "server",
            "start_metrics_server": "server"}


def __getattr__(name: str) -> Any:
    if name in _SOURCES:
        import importlib

        return getattr(importlib.import_module(f"sbrs.metrics.{_SOURCES[name]}"), name)
    raise AttributeError(f"module 'sbrs.metrics' has no attribute {name!r}")


__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_PORT",
    "MetricsObserver",
    "MetricsServer",
    "cli_arguments",
    "metrics_from_args",
    "start_metrics_server",
]
