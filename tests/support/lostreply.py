"""A TCP proxy that lets a COMMIT reach PostgreSQL and loses the server's reply.

A real network fault, not a mock: the store talks to the server through this proxy
(loopback only), which forwards every byte both ways. When armed (:meth:`LostReply.arm`),
the next COMMIT a client sends is forwarded to the server, the proxy waits for the
server's answer (so the commit has happened: PostgreSQL answers a COMMIT only after
committing) and then closes both sockets instead of forwarding it. The client sees its
connection die during COMMIT with the transaction committed: what a network cut, a
pooler restart or a failover after the WAL flush does.

The client's side of the frontend protocol is parsed just enough to find a COMMIT: the
untyped start-up messages (SSLRequest / GSSENCRequest, answered by one byte the proxy
passes on, then the StartupMessage), then typed messages: a simple query ``Q`` whose text
is ``COMMIT`` (what psycopg sends for ``conn.commit()``), or an extended-protocol ``P``
(Parse) of ``COMMIT``, cut at the ``S`` (Sync) that executes it. Use URLs with
``sslmode=disable`` (:meth:`LostReply.url`): an encrypted stream cannot be parsed.

Bounded: at most ``max_connections`` connections, daemon threads, and the proxy stops by
itself after ``lifetime_s`` if the test forgets to (``with LostReply(...)`` closes it).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType
from typing import Self

from sqlalchemy.engine import URL, make_url

__all__ = ["LostReply"]

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _is_commit(query: bytes) -> bool:
    text = query.rstrip(b"\x00").strip().rstrip(b";").strip().upper()
    return text in (b"COMMIT", b"COMMIT TRANSACTION", b"END")


class _Link:
    """One client connection and its server connection."""

    def __init__(self, proxy: LostReply, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = socket.create_connection(proxy.target, timeout=10)
        self.server.settimeout(None)
        self.client.settimeout(None)
        # Set (before the COMMIT is forwarded) when this link's next reply is to be lost.
        self.swallow = threading.Event()
        self.closed = threading.Event()

    def start(self) -> None:
        for target in (self._client_to_server, self._server_to_client):
            threading.Thread(target=target, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _send(self, data: bytes) -> bool:
        try:
            self.server.sendall(data)
        except OSError:
            self.close()
            return False
        return True

    def _client_to_server(self) -> None:
        # Start-up: untyped messages until the StartupMessage itself.
        while True:
            head = _recv_exact(self.client, 8)
            if head is None:
                return self.close()
            length, code = struct.unpack("!ii", head)
            body = _recv_exact(self.client, length - 8) if length > 8 else b""
            if body is None or not self._send(head + body):
                return self.close()
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                continue  # the server answers one byte; the client then starts again
            if code == _CANCEL_REQUEST:
                return  # the server closes the connection after it
            break
        parsed_commit = False
        while not self.closed.is_set():
            head = _recv_exact(self.client, 5)
            if head is None:
                return self.close()
            kind, length = head[:1], struct.unpack("!i", head[1:])[0]
            body = _recv_exact(self.client, length - 4)
            if body is None:
                return self.close()
            cut: bool | None = None
            if kind == b"Q" and _is_commit(body):
                cut = self.proxy._take_cut()
            elif kind == b"P":
                # Parse: a statement name, then the query text, NUL-terminated.
                query = body.split(b"\x00", 2)[1] if body.count(b"\x00") >= 2 else b""
                parsed_commit = _is_commit(query)
            elif kind == b"S" and parsed_commit:
                parsed_commit = False
                cut = self.proxy._take_cut()
            if cut is False:
                # Cut before the server sees the COMMIT: it rolls the transaction back.
                self.proxy._cut_done()
                return self.close()
            if cut:
                self.swallow.set()
            if not self._send(head + body):
                return None
        return None

    def _server_to_client(self) -> None:
        while not self.closed.is_set():
            try:
                data = self.server.recv(65536)
            except OSError:
                data = b""
            if not data:
                return self.close()
            if self.swallow.is_set():
                # The answer to the COMMIT: the server has committed. The client never
                # hears it; its connection dies instead.
                self.proxy._cut_done()
                return self.close()
            try:
                self.client.sendall(data)
            except OSError:
                return self.close()
        return None


class LostReply:
    """The proxy: ``with LostReply(url) as proxy: store_url = proxy.url()``.

    ``arm(n=1)`` loses the replies of the next ``n`` COMMITs (of any connection);
    :attr:`cuts` counts the cuts made so far; :meth:`wait_cut` waits for one.
    """

    def __init__(
        self, url: str | URL, *, max_connections: int = 64, lifetime_s: float = 120.0
    ) -> None:
        self.upstream = make_url(url) if isinstance(url, str) else url
        self.target = (self.upstream.host or "127.0.0.1", int(self.upstream.port or 5432))
        self.max_connections = max_connections
        self._deadline = time.monotonic() + lifetime_s
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._armed: list[bool] = []
        self.cuts = 0
        #: While True, new connections are accepted and closed at once (the server
        #: "unreachable"); set by a cut armed with ``then_refuse``.
        self.refuse_new = False
        self._refuse_after_cut = False
        self._cut_event = threading.Condition(self._lock)
        self._links: list[_Link] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self) -> str:
        """The upstream URL pointed at the proxy (unencrypted, so it can be parsed)."""
        via = self.upstream.set(host="127.0.0.1", port=self.port).update_query_dict(
            {"sslmode": "disable", "gssencmode": "disable"}
        )
        return via.render_as_string(hide_password=False)

    def arm(self, n: int = 1, *, deliver: bool = True, then_refuse: bool = False) -> None:
        """Cut the connections of the next ``n`` COMMITs: after the server committed
        (its reply lost), or with ``deliver=False`` before the COMMIT reaches it (the
        server rolls back: the outcome is just as unknown to the client). With
        ``then_refuse`` the server is unreachable after the cut, until
        ``refuse_new = False``."""
        with self._lock:
            self._armed.extend([deliver] * n)
            self._refuse_after_cut = then_refuse

    def disarm(self) -> None:
        with self._lock:
            self._armed.clear()

    def wait_cut(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until ``count`` replies in all were lost; False on timeout."""
        with self._cut_event:
            return self._cut_event.wait_for(lambda: self.cuts >= count, timeout)

    def _take_cut(self) -> bool | None:
        """None: forward this COMMIT; True: forward it and lose the reply; False: cut
        before forwarding it."""
        with self._lock:
            return self._armed.pop(0) if self._armed else None

    def _cut_done(self) -> None:
        with self._cut_event:
            if self._refuse_after_cut:
                self.refuse_new = True
            self.cuts += 1
            self._cut_event.notify_all()

    def _accept(self) -> None:
        while not self._stopped.is_set() and time.monotonic() < self._deadline:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            with self._lock:
                self._links = [link for link in self._links if not link.closed.is_set()]
                full = len(self._links) >= self.max_connections
            if full or self.refuse_new:
                client.close()
                continue
            try:
                link = _Link(self, client)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._links.append(link)
            link.start()
        self._shutdown()

    def _shutdown(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._stopped.set()
        self._thread.join(5)
        self._shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
