"""The control socket: JSON-lines requests (switch, env, status), the server thread, and its clients."""

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
