"""The ``/metrics`` HTTP endpoint: prometheus-client's WSGI app on a small, bounded server that can be stopped.

Bounded: ``WORKERS`` threads serve the connections (a fixed pool, not a thread per connection), each
connection is closed after ``CONNECTION_TIMEOUT_S`` without a byte, and at most ``MAX_PENDING`` connections
wait for a worker; more are closed at once. A scraper needs one connection for a few milliseconds, so
hundreds of idle connections cost a bounded handful of threads and sockets, never one thread each.

By default it binds to loopback only (``127.0.0.1``): a device's metrics are read by a local Prometheus or
through an SSH tunnel. Serving on another address needs ``allow_remote=True`` (app.yaml
``metrics.allow_remote: true``, ``sbrs run --metrics-allow-remote``): the endpoint has no authentication.
"""

from __future__ import annotations

import errno
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from sbrs.app.config import is_loopback_host
from sbrs.errors import InputError

DEFAULT_PORT = 9464
"""The port of ``monitoring/prometheus.yml`` (the port OpenTelemetry's Prometheus exporter uses too)."""
DEFAULT_ADDRESS = "127.0.0.1"
POLL_INTERVAL_S = 0.05
"""How often the serving thread checks for ``stop()`` (the delay of a stop)."""
WORKERS = 4
MAX_PENDING = 32
CONNECTION_TIMEOUT_S = 5.0


class _BoundedServer(WSGIServer):
    """Requests served by a fixed pool of ``WORKERS`` daemon threads; past ``MAX_PENDING`` connections waiting
    or in service, a new connection is closed at once."""

    #: the listen backlog (socketserver's default is 5): connections arriving faster than one accept loop takes
    #: them wait in the kernel instead of having their SYN dropped and retried a second or more later
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_PENDING)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="sbrs-metrics-worker")
        super().__init__(*args, **kwargs)  # binds: a failure calls server_close, which needs the pool

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            self._pool.submit(self._serve, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._slots.release()
            self.shutdown_request(request)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # no traceback on stderr (it belongs to ``sbrs run``'s reports); the connection is closed

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (stderr belongs to ``sbrs run``'s reports); an idle connection times out."""

    timeout = CONNECTION_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        return


class MetricsServer:
    """A running ``/metrics`` endpoint; ``stop()`` (or leaving the ``with`` block) shuts it down."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread, address: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self._stopped = False
        self._lock = threading.Lock()
        self.address = address
        self.port = int(httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://ADDRESS:PORT/metrics`` (IPv6 addresses in brackets)."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    @property
    def running(self) -> bool:
        return not self._stopped and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket (idempotent)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def check_endpoint(port: object, address: object, allow_remote: bool, *, option: str = "metrics") -> tuple[int, str]:
    """Validate a port (0 = any free port) and bind address; ``InputError`` (one line) naming ``option``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError(f"port must be an integer in 0..65535, got {port!r}", field=option)
    if not isinstance(address, str) or not address.strip():
        raise InputError(f"address must be a non-empty host name or IP address, got {address!r}",
                         field=option)
    if not allow_remote and not is_loopback_host(address):
        raise InputError(f"'{address}' is not a loopback address; serving metrics beyond this machine needs"
                         " allow_remote (app.yaml metrics.allow_remote: true, or --metrics-allow-remote)",
                         field=option)
    return port, address.strip().strip("[]")


def start_metrics_server(registry: CollectorRegistry, port: int, address: str = DEFAULT_ADDRESS,
                         allow_remote: bool = False) -> MetricsServer:
    """Serve ``registry`` at ``http://address:port/metrics`` from a daemon thread; return the ``MetricsServer``.

    ``port`` 0 picks a free port (``MetricsServer.port`` tells which). A port already in use, an address that
    cannot be bound, or a non-loopback address without ``allow_remote`` is an ``InputError`` naming them.
    """
    port, host = check_endpoint(port, address, allow_remote)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("MetricsHTTPServer", (_BoundedServer,), {"address_family": family})
        httpd = make_server(host, port, make_wsgi_app(registry), server_class, handler_class=_QuietHandler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InputError(f"port {port} on {host} is already in use (choose another with --metrics-port or"
                             " metrics.port)", field="metrics") from None
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise InputError(f"cannot serve metrics on {host}:{port}: {reason}", field="metrics") from None
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                              name=f"sbrs-metrics-{httpd.server_address[1]}", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread, host)
