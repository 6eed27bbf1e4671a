"""The control socket: JSON-lines requests (switch, env, status), the server thread, and its clients."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.server.client import Connection, add_client_commands, send_request
    from sbrs.server.protocol import MAX_LINE_BYTES, LineSplitter, Request, RequestStats, parse_request
    from sbrs.server.server import Server, default_socket_path, parse_listen

__all__ = [
    "MAX_LINE_BYTES",
    "Connection",
    "LineSplitter",
    "Request",
    "RequestStats",
    "Server",
    "add_client_commands",
    "default_socket_path",
    "parse_listen",
    "parse_request",
    "send_request",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "Connection": "sbrs.server.client",
    "add_client_commands": "sbrs.server.client",
    "send_request": "sbrs.server.client",
    "MAX_LINE_BYTES": "sbrs.server.protocol",
    "LineSplitter": "sbrs.server.protocol",
    "Request": "sbrs.server.protocol",
    "RequestStats": "sbrs.server.protocol",
    "parse_request": "sbrs.server.protocol",
    "Server": "sbrs.server.server",
    "default_socket_path": "sbrs.server.server",
    "parse_listen": "sbrs.server.server",
})
