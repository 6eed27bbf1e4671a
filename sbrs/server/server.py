"""The control socket server: JSON-lines requests (``sbrs.server.protocol``) on a Unix socket and loopback TCP.

``Server(controller, socket_path, listen=...)`` runs an asyncio loop in a background thread; ``start()``
returns once it listens, ``stop()`` closes every connection and removes the socket file; it is a context
manager. Each client is served by its own coroutine, and the controller is called on a small worker-thread
pool, so a client that sends half a line and stalls, or never reads its replies, holds up nobody but itself,
and neither does a slow controller call. ``switch`` requests are the exception: they only post a switch
request to the control node (a lock held for microseconds, never inference), so they run on the loop's own
thread — the hop to a worker thread and back cost the tiny app ~0.4 ms of its reply time (0.82-1.09 →
0.44-0.59 ms mean, ``benchmarks/socket_switching.py``), and the switch itself waited for it. At most
``max_clients`` connections are served at once, and each is closed after ``idle_timeout_s`` without a byte
(error reply ``idle_timeout``), so connections that never finish a line cannot hold the slots for long. Past
``max_clients``, up to as many more connections may each send one ``status`` request within a second (what an
operator needs to see what is going on) and get it answered; anything else there, and any further connection,
gets ``too_many_clients`` and is closed.

The Unix socket is bound and chmod-ed to 0600 before ``listen()``, so no other user can ever connect. An
existing path is replaced only when it is a socket nobody listens on (stale); a live socket or any other
file is refused. The default path is ``$XDG_RUNTIME_DIR/sbrs/<app>.sock``, else ``/tmp/sbrs-<uid>/<app>.sock``;
the directory is created with mode 0700 and must belong to the user. TCP (``--listen HOST:PORT``) binds to
loopback addresses only (``localhost``, ``127.x.y.z``, ``::1``): the socket has no authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

from sbrs.control.controller import Controller, RequestError
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.server.protocol import (
    MAX_LINE_BYTES,
    LineSplitter,
    RequestStats,
    decode_message,
    encode_reply,
    error_reply,
    execute,
    parse_request,
    reply_context,
)

MAX_UNIX_PATH_BYTES = 107
READ_CHUNK = MAX_LINE_BYTES
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0
REFUSE_WAIT_S = 1.0
IDLE_TIMEOUT_S = 60.0
"""A connection that sends nothing for this long gets an ``idle_timeout`` reply and is closed."""


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
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            raise InputError(f"{path} exists and is not a socket; refusing to replace it", field="--socket")
        if _socket_is_live(path):
            raise SbrsRuntimeError(f"socket {path} is in use by a running server; stop it or choose another --socket")
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
                 listen: str | None = None, app_name: str = "sbrs", max_clients: int = 64, workers: int = 4,
                 stats: RequestStats | None = None, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.controller = controller
        self.stats = stats or RequestStats()
        self.max_clients = max_clients
        self.idle_timeout_s = idle_timeout_s
        self._extra = 0  # connections past max_clients waiting (briefly) for a status request
        self._default_path = socket_path is None
        self.socket_path: Path = Path(socket_path) if socket_path is not None else default_socket_path(app_name)
        self._listen = parse_listen(listen) if listen is not None else None
        self.tcp_address: tuple[str, int] | None = None
        self._workers = workers
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._served = 0
        self._writers: set[asyncio.StreamWriter] = set()
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
        sockets = [bind_unix_socket(self.socket_path)]
        self._socket_inode = os.stat(self.socket_path).st_ino
        try:
            if self._listen is not None:
                sockets.append(bind_tcp_socket(*self._listen))
                self.tcp_address = sockets[-1].getsockname()[:2]
        except BaseException:
            for sock in sockets:
                sock.close()
            self._remove_socket_file()
            raise
        self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="sbrs-control")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(sockets, ready, failure), name="sbrs-server",
                                        daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT_S) or failure:
            self.stop()
            raise SbrsRuntimeError(f"the control server did not start: {failure[0] if failure else 'timed out'}")
        return self

    def stop(self) -> None:
        """Close every connection, stop the thread, remove the socket file. Safe to call twice."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is not None and loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
            thread.join(STOP_TIMEOUT_S)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._thread = self._loop = self._stopping = self._executor = None
        self._remove_socket_file()

    def _remove_socket_file(self) -> None:
        """Remove the socket file if it is still the one this server bound."""
        with contextlib.suppress(OSError):
            if self._socket_inode is not None and os.stat(self.socket_path).st_ino == self._socket_inode:
                self.socket_path.unlink()
        self._socket_inode = None

    def _run(self, sockets: list[socket.socket], ready: threading.Event, failure: list[BaseException]) -> None:
        """The server thread: ``asyncio.run`` cancels whatever is left when ``_serve`` returns."""
        try:
            asyncio.run(self._serve(sockets, ready))
        except BaseException as exc:  # reported to start() when it happens before ready
            failure.append(exc)
            ready.set()
        finally:
            for sock in sockets:
                sock.close()

    async def _serve(self, sockets: list[socket.socket], ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        servers = [await asyncio.start_unix_server(self._client, sock=sockets[0])]
        servers += [await asyncio.start_server(self._client, sock=sock) for sock in sockets[1:]]
        ready.set()
        await self._stopping.wait()
        await self._shut_down(servers, sockets)

    async def _shut_down(self, servers: list[asyncio.AbstractServer], sockets: list[socket.socket]) -> None:
        """Stop accepting, let connections being accepted finish (``_client`` returns at once now), cut off the
        others. Closing an asyncio server while an accepted connection is still being set up leaks that socket
        (Python 3.11), hence the order: stop reading the listening sockets, drain the accepts, then close."""
        loop = asyncio.get_running_loop()
        for sock in sockets:
            loop.remove_reader(sock.fileno())
        current = asyncio.current_task()
        while others := [task for task in asyncio.all_tasks() if task is not current]:
            for writer in list(self._writers):
                writer.transport.abort()
            for task in others:
                if task in self._connections:  # never cancel a task before it starts: it could not close
                    task.cancel()
            _, pending = await asyncio.wait(others, timeout=STOP_TIMEOUT_S / 2)
            for task in pending:
                task.cancel()
        for server in servers:
            server.close()
        for _ in range(3):
            await asyncio.sleep(0)  # aborted transports close their sockets in callbacks: let them run

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until it ends; never raises."""
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        self._writers.add(writer)
        try:
            if self._stopping is None or self._stopping.is_set():
                return  # the finally clause closes the connection
            if self._served >= self.max_clients:
                if self._extra >= self.max_clients:
                    await self._refuse(reader, writer)
                    return
                self._extra += 1
                try:
                    await self._status_only(reader, writer)
                finally:
                    self._extra -= 1
                return
            self._served += 1
            try:
                await self._converse(reader, writer)
                writer.close()  # flushes the last replies; a client that does not read them is cut off
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)
            finally:
                self._served -= 1
        except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)  # type: ignore[arg-type]
            self._writers.discard(writer)
            if not writer.transport.is_closing() or writer.transport.get_write_buffer_size():
                writer.transport.abort()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer ``too_many_clients`` and close; the client's first request is read (briefly) so that closing
        with unread input does not reset the connection before the client has read the reply."""
        reply = error_reply(RequestError("too_many_clients", f"more than {self.max_clients} clients; try later"))
        self.stats.count(reply)
        try:
            writer.write(encode_reply(reply))
            await asyncio.wait_for(reader.read(READ_CHUNK), REFUSE_WAIT_S)
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), REFUSE_WAIT_S)
        except (OSError, asyncio.TimeoutError):
            pass

    async def _status_only(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The connection past ``max_clients``: one ``status`` request is answered, anything else refused."""
        try:
            line = await asyncio.wait_for(reader.readline(), REFUSE_WAIT_S)
        except (OSError, ValueError, asyncio.TimeoutError):  # ValueError: a line beyond the stream's limit
            line = b""
        try:
            message = decode_message(line.rstrip(b"\n")) if line.strip() else {}
        except RequestError:
            message = {}
        if message.get("op") == "status" and set(message) <= {"op", "id"}:
            reply = await self._reply(line.rstrip(b"\n"))
        else:
            reply = error_reply(RequestError("too_many_clients", f"more than {self.max_clients} clients; only a "
                                             "status request is answered now; try later"))
        self.stats.count(reply)
        try:
            writer.write(encode_reply(reply))
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), REFUSE_WAIT_S)
        except (OSError, asyncio.TimeoutError):
            pass

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read lines and answer each in order until the client closes its side or stays idle too long."""
        splitter = LineSplitter()
        while True:
            try:
                data = await asyncio.wait_for(reader.read(READ_CHUNK), self.idle_timeout_s)
            except asyncio.TimeoutError:
                reply = error_reply(RequestError("idle_timeout", f"nothing received for {self.idle_timeout_s:g} s;"
                                                 " connection closed"))
                self.stats.count(reply)
                writer.write(encode_reply(reply))
                return
            lines = splitter.feed(data) if data else [splitter.finish()]
            for line in lines:
                if line is None and not data:
                    continue
                reply = await self._reply(line)
                self.stats.count(reply)
                writer.write(encode_reply(reply))
                await writer.drain()  # a client that does not read blocks only itself, here
            if not data:
                return

    async def _reply(self, line: bytes | None) -> dict[str, Any]:
        """The reply to one line (None: a line that was too long)."""
        message: dict[str, Any] = {}
        try:
            if line is None:
                raise RequestError("too_long", f"request longer than {MAX_LINE_BYTES} bytes; discarded up to the "
                                               "next newline")
            message = decode_message(line)
            request = parse_request(message, tuple(self.controller.scenarios))
        except RequestError as exc:
            return error_reply(exc, *reply_context(message))
        loop = asyncio.get_running_loop()
        try:
            if request.op == "switch":  # posts an SSR and returns (never waits for inference): no thread hop
                return execute(request, self.controller, self.stats)
            return await loop.run_in_executor(self._executor, execute, request, self.controller, self.stats)
        except Exception as exc:  # a controller bug must not take the server down
            text = " ".join(str(exc).split())[:200]
            return error_reply(RequestError("internal", f"{type(exc).__name__}: {text}"), request.op, request.id)
