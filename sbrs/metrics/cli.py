"""Command-line wiring of metrics for ``sbrs run``: ``cli_arguments(parser)`` and ``metrics_from_args``.

The ``sbrs run`` command wires metrics in three lines::

    observer, server = metrics_from_args(args, app)       # InputError (exit 2) on a bad or busy port
    try: run_app(..., observers=[observer])
    finally: server is not None and server.stop()

Command-line options override the app file's ``metrics:`` section (``port``, ``address``, ``allow_remote``);
without a port from either, no server is started (the observer still counts, at negligible cost).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError

if TYPE_CHECKING:
    from sbrs.metrics.observer import MetricsObserver
    from sbrs.metrics.server import MetricsServer


def _port(text: str) -> int:
    """argparse type of ``--metrics-port``: an integer in 1..65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {port}")
    return port


def cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--metrics-port P``, ``--metrics-address ADDR`` and ``--metrics-allow-remote`` to ``parser``."""
    group = parser.add_argument_group("metrics", "serve Prometheus metrics at http://ADDR:P/metrics "
                                      "(overrides the app file's metrics: section)")
    group.add_argument("--metrics-port", type=_port, default=None, metavar="P",
                       help="serve metrics on this port (default: metrics.port of the app, else no server)")
    group.add_argument("--metrics-address", default=None, metavar="ADDR",
                       help="bind address (default: metrics.address of the app, 127.0.0.1); a non-loopback "
                            "address needs --metrics-allow-remote")
    group.add_argument("--metrics-allow-remote", action="store_true", default=False,
                       help="allow a non-loopback bind address (the endpoint has no authentication)")


def metrics_from_args(args: argparse.Namespace, app: Any) -> tuple[MetricsObserver, MetricsServer | None]:
    """The observer for ``app`` (an ``App`` or ``AppConfig``) and, when a port is set, its running server.

    The server starts at once, before the app loads its models, so a busy port fails fast (``InputError``).
    """
    from sbrs.metrics.observer import MetricsObserver
    from sbrs.metrics.server import start_metrics_server

    config = getattr(app, "config", app)
    section = getattr(config, "metrics", None)
    port = getattr(args, "metrics_port", None)
    address = getattr(args, "metrics_address", None)
    allow_remote = bool(getattr(args, "metrics_allow_remote", False))
    if section is not None:
        port = section.port if port is None else port
        address = section.address if address is None else address
        allow_remote = allow_remote or section.allow_remote
    observer = MetricsObserver.for_app(config)
    if port is None:
        if getattr(args, "metrics_address", None) is not None or getattr(args, "metrics_allow_remote", False):
            raise InputError("--metrics-address and --metrics-allow-remote need --metrics-port (or metrics.port"
                             " in the app file)")
        return observer, None
    server = start_metrics_server(observer.registry, port, address or "127.0.0.1", allow_remote)
    return observer, server
