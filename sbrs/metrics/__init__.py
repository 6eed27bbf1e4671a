"""Prometheus metrics of a running app: an observer of run events, the ``/metrics`` server, CLI wiring.

``MetricsObserver`` implements ``sbrs.control.events.RunObserver`` on its own ``CollectorRegistry``;
``start_metrics_server`` serves a registry over HTTP (loopback unless allowed otherwise); ``cli_arguments``
and ``metrics_from_args`` give ``sbrs run`` its ``--metrics-*`` options. Metric names are listed in
``sbrs.metrics.observer``; Prometheus and Grafana files are in ``monitoring/``.
"""

from __future__ import annotations

from sbrs.metrics.cli import cli_arguments, metrics_from_args
from sbrs.metrics.observer import MetricsObserver
from sbrs.metrics.server import DEFAULT_ADDRESS, DEFAULT_PORT, MetricsServer, start_metrics_server

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_PORT",
    "MetricsObserver",
    "MetricsServer",
    "cli_arguments",
    "metrics_from_args",
    "start_metrics_server",
]
