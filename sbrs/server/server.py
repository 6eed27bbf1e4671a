"""The control socket server: JSON-lines requests (``sbrs.server.protocol``) on a Unix socket and loopback TCP.

``Server(controller, socket_path, listen=...)`` serves every connection from one background thread with a
``selectors`` loop over non-blocking sockets; ``start()`` returns once it listens, ``stop()`` closes every
connection and removes the socket file; it is a context manager. Each connection keeps its own input and output
buffers, so a client that sends half a line and stalls, or never reads its replies (the server stops reading
from it while 64 KiB of its replies wait), holds up nobody but itself. ``switch`` and ``status`` are answered on
the loop's thread: they take the controller's lock for microseconds and never wait for inference (a hop to a
worker thread and back cost the tiny app ~0.4 ms of its reply time, ``benchmarks/socket_switching.py``).
``env`` runs the policy and goes to a small worker pool, so a slow or stuck controller call holds up only its
own connection, whose later requests wait for it (replies keep their order). No asyncio: it imports ``ssl``
and OpenSSL's libraries, about 7 MB of resident memory a device would pay for a socket that carries a few
requests a minute.

At most ``max_clients`` connections are served at once, and each is closed after ``idle_timeout_s`` without a
byte (error reply ``idle_timeout``), so connections that never finish a line cannot hold the slots for long.
Past ``max_clients``, up to as many more connections may each send one ``status`` request within a second (what
an operator needs to see what is going on) and get it answered; anything else there, and any further
connection, gets ``too_many_clients`` and is closed. A connection ends gracefully: once its last reply is sent,
the server shuts its side, reads what the client still sends until the client closes (or a few seconds pass),
then closes, so a client never sees its unread replies cut off by a reset.

The Unix socket is bound and chmod-ed to 0600 before ``listen()``, so no other user can ever connect. An
existing path is replaced only when it is a socket nobody listens on (stale); a live socket or any other
file is refused. Servers starting together take turns (a lock on the socket's folder from the check to
``listen()``), so the second sees the first's socket live. The default path is
``$XDG_RUNTIME_DIR/sbrs/<app>.sock``, else ``/tmp/sbrs-<uid>/<app>.sock``; the directory is created with mode
0700 and must belong to the user. TCP (``--listen HOST:PORT``) binds to
loopback addresses only (``localhost``, ``127.x.y.z``, ``::1``): the socket has no authentication.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import selectors
import socket
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sbrs.control.controller import Controller, RequestError
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.folder_lock import folder_lock
from sbrs.server.protocol import (
    MAX_LINE_BYTES,
    LineSplitter,
    Request,
    RequestStats,
    decode_message,
    encode_reply,
    error_reply,
    execute,
    parse_request,
    reply_context,
)

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

MAX_UNIX_PATH_BYTES = 107
READ_CHUNK = MAX_LINE_BYTES
STOP_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0
REFUSE_WAIT_S = 1.0
IDLE_TIMEOUT_S = 60.0
"""A connection that sends nothing for this long gets an ``idle_timeout`` reply and is closed."""
HIGH_WATER_BYTES = 64 * 1024
"""A connection's replies waiting to be sent beyond which the server stops reading its requests."""


def default_socket_dir() -> Path:
    """``$XDG_RUNTIME_DIR/sbrs`` when that variable names a directory, else ``/tmp/sbrs-<uid>``."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and Path(runtime_dir).is_dir():
        return Path(runtime_dir) / "sbrs"
    return Path("/tmp") / f"sbrs-{os.getuid()}"


def default_socket_path(app_name: str) -> Path:
    """Where ``sbrs run`` listens for app ``app_name`` unless told otherwise."""
    return default_socket_dir() / f"{app_name}.sock"


def ensure_private_dir(directory: Path) -> None:
    """Create ``directory`` with mode 0700, or check that it is a real directory of this user and make it 0700."""
    try:
        directory.mkdir(mode=0o700, parents=False, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise SbrsRuntimeError(f"cannot create the socket directory {directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise SbrsRuntimeError(f"socket directory {directory} is not a directory owned by this user; refusing it")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(directory, 0o700)


def parse_host_port(text: str, option: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPV6]:PORT`` → (host, port); ``InputError`` naming ``option`` when malformed."""
    host, separator, port_text = text.rpartition(":")
    if not separator or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise InputError(f"expected HOST:PORT (e.g. 127.0.0.1:7070), got {text!r}", field=option)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def parse_listen(text: str) -> tuple[str, int]:
    """A ``--listen`` address, which must be loopback: ``localhost`` (→ 127.0.0.1), ``127.x.y.z`` or ``::1``."""
    host, port = parse_host_port(text)
    if host == "localhost":
        return "127.0.0.1", port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise InputError(f"{text}: only loopback addresses are accepted (localhost, 127.0.0.1, ::1): the control "
                         "socket has no authentication", field="--listen")
    return host, port


def _socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # e.g. no permission: someone else's, leave it alone
    finally:
        probe.close()
    return True


def bind_unix_socket(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` with mode 0600 (module docstring for stale and live paths)."""
    if len(os.fsencode(path)) > MAX_UNIX_PATH_BYTES:
        raise InputError(f"socket path is longer than {MAX_UNIX_PATH_BYTES} bytes: {path}", field="--socket")
    if not path.parent.is_dir():
        raise InputError(f"no such directory for the socket: {path.parent}", field="--socket")
    # The folder is locked from the check to listen(): two servers started together on one stale path both found
    # it stale, and the second unlinked the first's new socket, which then served nobody.
    with folder_lock(path.parent):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None:
            if not stat.S_ISSOCK(info.st_mode):
                raise InputError(f"{path} exists and is not a socket; refusing to replace it", field="--socket")
            if _socket_is_live(path):
                raise SbrsRuntimeError(f"socket {path} is in use by a running server; stop it or choose another "
                                       "--socket")
            path.unlink()  # stale: left behind by a server that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, 0o600)  # before listen(): until then nobody can connect
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise SbrsRuntimeError(f"cannot listen on socket {path}: {exc.strerror or exc}") from None
    return sock


def bind_tcp_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on loopback ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise SbrsRuntimeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


class Server:
    """The control socket server (module docstring)."""

    def __init__(self, controller: Controller, socket_path: str | os.PathLike[str] | None = None, *,
                 listen: str | None = None, app_name: str = "sbrs", max_clients: int = 64, workers: int = 2,
                 stats: RequestStats | None = None, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.controller = controller
        self.stats = stats or RequestStats()
        self.max_clients = max_clients
        self.idle_timeout_s = idle_timeout_s
        self._default_path = socket_path is None
        self.socket_path: Path = Path(socket_path) if socket_path is not None else default_socket_path(app_name)
        self._listen = parse_listen(listen) if listen is not None else None
        self.tcp_address: tuple[str, int] | None = None
        self.workers = workers  # threads for env requests (the policy), made at the first one
        self._thread: threading.Thread | None = None
        self._loop: _Loop | None = None
        self._socket_inode: int | None = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Server:
        """Bind the sockets (errors are raised here, in the caller) and serve them in a background thread."""
        if self._thread is not None:
            raise SbrsRuntimeError("the control server is already started")
        if self._default_path:
            ensure_private_dir(self.socket_path.parent)
        listeners = [bind_unix_socket(self.socket_path)]
        self._socket_inode = os.stat(self.socket_path).st_ino
        try:
            if self._listen is not None:
                listeners.append(bind_tcp_socket(*self._listen))
                self.tcp_address = listeners[-1].getsockname()[:2]
            self._loop = _Loop(self, listeners)
        except BaseException:
            for sock in listeners:
                sock.close()
            self._remove_socket_file()
            raise
        self._thread = threading.Thread(target=self._loop.run, name="sbrs-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every connection, stop the thread, remove the socket file. Safe to call twice."""
        if self._loop is not None:
            self._loop.stop()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
        self._thread = self._loop = None
        self._remove_socket_file()

    def _remove_socket_file(self) -> None:
        """Remove the socket file if it is still the one this server bound."""
        with contextlib.suppress(OSError):
            if self._socket_inode is not None and os.stat(self.socket_path).st_ino == self._socket_inode:
                self.socket_path.unlink()
        self._socket_inode = None

    def reply_now(self, line: bytes | None) -> tuple[dict[str, Any] | None, Request | None]:
        """The reply to one line (None: a line that was too long) when it can be given on the loop's thread, or
        the parsed ``env`` request that must go to a worker."""
        message: dict[str, Any] = {}
        try:
            if line is None:
                raise RequestError("too_long", f"request longer than {MAX_LINE_BYTES} bytes; discarded up to the "
                                               "next newline")
            message = decode_message(line)
            request = parse_request(message, tuple(self.controller.scenarios))
        except RequestError as exc:
            return error_reply(exc, *reply_context(message)), None
        if request.op == "env":
            return None, request
        return self.execute(request), None

    def execute(self, request: Request) -> dict[str, Any]:
        """Carry out a valid request; a controller bug becomes an ``internal`` error reply, never a dead server."""
        try:
            return execute(request, self.controller, self.stats)
        except Exception as exc:
            text = " ".join(str(exc).split())[:200]
            return error_reply(RequestError("internal", f"{type(exc).__name__}: {text}"), request.op, request.id)


@dataclass(eq=False)
class _Client:
    """One connection's state. ``mode``: ``served``; ``status_only`` (past ``max_clients``: one status request
    within ``REFUSE_WAIT_S``); ``closing`` (the last reply is queued: send it, shut our side, read until the
    client closes or ``deadline``)."""

    sock: socket.socket
    mode: str
    deadline: float
    splitter: LineSplitter = field(default_factory=LineSplitter)
    lines: deque[bytes | None] = field(default_factory=deque)
    out: bytearray = field(default_factory=bytearray)
    busy: bool = False  # an env request of this connection is on a worker
    ended: bool = False  # the client closed its side
    shut: bool = False  # our side is shut (closing, everything sent)
    mask: int = 0


class _Loop:
    """The server thread's ``selectors`` loop: accepts, reads, answers, writes, expires (module docstring)."""

    def __init__(self, server: Server, listeners: list[socket.socket]) -> None:
        self.server = server
        self.listeners = listeners
        self.selector = selectors.DefaultSelector()
        self.wake_reader, self.wake_writer = socket.socketpair()
        self.wake_reader.setblocking(False)
        self.wake_writer.setblocking(False)
        self.clients: set[_Client] = set()
        self.finished: deque[tuple[_Client, dict[str, Any]]] = deque()  # env replies from the workers
        self.executor: ThreadPoolExecutor | None = None
        self.stopping = False
        for sock in listeners:
            self.selector.register(sock, selectors.EVENT_READ, None)
        self.selector.register(self.wake_reader, selectors.EVENT_READ, self.wake_reader)

    def stop(self) -> None:
        """From any thread: end the loop (it closes everything on its way out)."""
        self.stopping = True
        self.wake()

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed (the loop ended)
            self.wake_writer.send(b"\0")

    def run(self) -> None:
        try:
            while not self.stopping:
                events = self.selector.select(self.timeout())
                for key, mask in events:
                    if key.data is None:
                        self.accept(key.fileobj)  # type: ignore[arg-type]
                    elif key.data is self.wake_reader:
                        with contextlib.suppress(OSError):
                            self.wake_reader.recv(4096)
                    else:
                        self.serve(key.data, mask)
                while self.finished:
                    client, reply = self.finished.popleft()
                    if client in self.clients:
                        client.busy = False
                        self.answer(client, reply)
                        self.advance(client)
                self.expire()
        finally:
            self.close()

    def timeout(self) -> float | None:
        deadlines = [client.deadline for client in self.clients if not client.busy]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def accept(self, listener: socket.socket) -> None:
        served = sum(client.mode == "served" for client in self.clients)
        extra = sum(client.mode == "status_only" for client in self.clients)
        for _ in range(64):  # a burst of connections is taken in turns with the other sockets
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of file descriptors: the connection stays in the backlog
                return
            sock.setblocking(False)
            now = time.monotonic()
            if served < self.server.max_clients:
                client, served = _Client(sock, "served", now + self.server.idle_timeout_s), served + 1
            elif extra < self.server.max_clients:
                client, extra = _Client(sock, "status_only", now + REFUSE_WAIT_S), extra + 1
            else:
                client = _Client(sock, "closing", now + REFUSE_WAIT_S)
                refusal = RequestError("too_many_clients", f"more than {self.server.max_clients} clients; try later")
                self.answer(client, error_reply(refusal))
            self.clients.add(client)
            self.advance(client)

    def serve(self, client: _Client, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self.read(client)
        if client in self.clients and mask & selectors.EVENT_WRITE and client.out:
            self.write(client)
        if client in self.clients:
            self.advance(client)

    def read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(client)
            return
        if client.mode == "closing":  # read only to see the client close; what it still sends is ignored
            client.ended = not data
            return
        if data:
            client.lines.extend(client.splitter.feed(data))
            if client.mode == "served":
                client.deadline = time.monotonic() + self.server.idle_timeout_s
        else:
            client.ended = True
            last = client.splitter.finish()
            if last is not None:
                client.lines.append(last)

    def write(self, client: _Client) -> None:
        try:
            sent = client.sock.send(client.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the client went away
            self.drop(client)
            return
        del client.out[:sent]

    def answer(self, client: _Client, reply: dict[str, Any]) -> None:
        self.server.stats.count(reply)
        client.out += encode_reply(reply)

    def advance(self, client: _Client) -> None:
        """Answer what can be answered, send what is waiting, close what is done, and set what to wait for."""
        if client.mode == "served":
            self.answer_lines(client)
            if client.ended and not client.lines and not client.busy:
                self.finish(client, CLOSE_TIMEOUT_S)
        elif client.mode == "status_only" and (client.lines or client.ended):
            self.answer_status_only(client)
        if client.out:
            self.write(client)
            if client not in self.clients:
                return
        if client.mode == "closing" and not client.out:
            if client.ended:
                self.drop(client)
                return
            if not client.shut:
                with contextlib.suppress(OSError):
                    client.sock.shutdown(socket.SHUT_WR)
                client.shut = True
        wants_input = (not client.ended and not client.busy and not client.lines
                       and len(client.out) < HIGH_WATER_BYTES)
        # Lines left unanswered at the high-water mark are answered when the socket takes more: wait for it to be
        # writable even when everything queued is already sent, or no event would ever come for them.
        unanswered = client.mode == "served" and bool(client.lines) and not client.busy
        mask = ((selectors.EVENT_READ if wants_input else 0)
                | (selectors.EVENT_WRITE if client.out or unanswered else 0))
        if mask != client.mask:
            if client.mask == 0:
                self.selector.register(client.sock, mask, client)
            elif mask == 0:
                self.selector.unregister(client.sock)
            else:
                self.selector.modify(client.sock, mask, client)
            client.mask = mask

    def answer_lines(self, client: _Client) -> None:
        while client.lines and not client.busy and len(client.out) < HIGH_WATER_BYTES:
            reply, request = self.server.reply_now(client.lines.popleft())
            if reply is not None:
                self.answer(client, reply)
                continue
            assert request is not None
            client.busy = True
            self.submit(client, request)
        if not client.lines and not client.busy:
            client.deadline = time.monotonic() + self.server.idle_timeout_s

    def answer_status_only(self, client: _Client) -> None:
        line = client.lines[0] if client.lines else None
        try:
            message = decode_message(line) if line is not None and line.strip() else {}
        except RequestError:
            message = {}
        if message.get("op") == "status" and set(message) <= {"op", "id"}:
            reply, _ = self.server.reply_now(line)
            assert reply is not None
        else:
            reply = error_reply(RequestError("too_many_clients", f"more than {self.server.max_clients} clients; "
                                             "only a status request is answered now; try later"))
        client.lines.clear()
        self.answer(client, reply)
        self.finish(client, REFUSE_WAIT_S)

    def finish(self, client: _Client, wait_s: float) -> None:
        client.mode, client.deadline = "closing", time.monotonic() + wait_s

    def submit(self, client: _Client, request: Request) -> None:
        if self.executor is None:  # imported at the first env request: most runs never get one
            from concurrent.futures import ThreadPoolExecutor

            self.executor = ThreadPoolExecutor(max_workers=self.server.workers, thread_name_prefix="sbrs-control")

        def done(future: Future[dict[str, Any]]) -> None:
            if not future.cancelled():
                self.finished.append((client, future.result()))
                self.wake()

        self.executor.submit(self.server.execute, request).add_done_callback(done)

    def expire(self) -> None:
        now = time.monotonic()
        for client in [client for client in self.clients if not client.busy and client.deadline <= now]:
            if client.mode == "served":
                self.answer(client, error_reply(RequestError(
                    "idle_timeout", f"nothing received for {self.server.idle_timeout_s:g} s; connection closed")))
                client.lines.clear()
                self.finish(client, CLOSE_TIMEOUT_S)
                self.advance(client)
            elif client.mode == "status_only":
                client.ended = True
                self.advance(client)
            else:  # closing: the client neither read its replies nor closed in time
                self.drop(client)

    def drop(self, client: _Client) -> None:
        self.clients.discard(client)
        if client.mask:
            self.selector.unregister(client.sock)
        client.mask = 0
        client.sock.close()

    def close(self) -> None:
        for client in list(self.clients):
            self.drop(client)
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
        for sock in (*self.listeners, self.wake_reader, self.wake_writer):
            sock.close()
        self.selector.close()
