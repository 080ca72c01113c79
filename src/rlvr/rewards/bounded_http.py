"""POST a JSON request with a total deadline and a cap on the reply's size.

``requests``' ``timeout`` bounds the connect and *each socket read*, not the reply: a server
that sends one byte every few seconds holds a request for as long as it likes, and
``response.json()`` reads a reply of any size into memory. ``post_json`` bounds both:

- Deadline: ``timeout_s`` covers connect, send, status line, headers and the whole body. The
  request runs on a Session of its own whose connections register their socket; a timer shuts
  that socket down when the deadline passes, which ends whatever read is in progress (a TLS
  handshake read, the headers, the body). The caller gets ``DeadlineExceeded``.
- Size: the body is streamed in ``CHUNK_BYTES`` pieces and dropped as soon as it passes
  ``max_bytes`` (at once when Content-Length already says so), and the connection is closed
  without reading the rest: ``ReplyTooLarge``.

Convention: one deadline per call (a caller that retries gives each attempt its own); name
resolution (DNS) runs before a socket exists and is bounded only by the system resolver. The
request asks for ``Accept-Encoding: identity`` and the body is not decoded, so a compressed
reply cannot expand past the cap (such a reply fails to parse as JSON instead). A Session per
call, like ``requests.post``, so no connection is reused between calls; proxies from the
environment are honoured as by ``requests`` (not the deadline's early shutdown through a SOCKS
proxy: there only ``timeout_s`` per read applies).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import ProxyManager

MAX_REPLY_BYTES = 1 << 20  # 1 MiB: a judge score or a rewritten problem is a few kB of JSON
CHUNK_BYTES = 64 << 10


class DeadlineExceeded(requests.Timeout):
    """The whole request (connect, send, the full reply) took longer than its deadline."""


class ReplyTooLarge(ValueError):
    """The reply body is longer than the cap; it was not read to its end."""


class EndpointDown(ConnectionError):
    """Requests in a row to one endpoint all failed (timeouts, refused connections, 5xx).

    A builtin ``ConnectionError``, so code that may not import rlvr.rewards (rlvr.data) can let
    it through while it still catches everything else a back end raises.
    """


@dataclass(frozen=True)
class Reply:
    """HTTP status and, for a 200, the whole body (other bodies are not read: b"")."""

    status: int
    body: bytes


class _Watch:
    """The sockets of one request, shut down when its deadline passes (timer thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.expired = False
        self.done = False

    def track(self, sock: socket.socket | None) -> None:
        with self.lock:
            if sock is not None and not self.done:
                self.sockets.append(sock)
                if self.expired:
                    _shutdown(sock)

    def expire(self) -> None:
        with self.lock:  # under the lock: finish() closes nothing while we shut sockets down
            if self.done:
                return
            self.expired = True
            for sock in self.sockets:
                _shutdown(sock)

    def finish(self) -> None:
        with self.lock:
            self.done = True


def _shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: the fd only, leaving the TLS state to the reader.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed, or detached when TLS wrapped it
        pass


_current = threading.local()  # the _Watch of the request running on this thread


class _Watched:
    """Connection mix-in: report the TCP socket (before TLS) and the final one to this thread's watch."""

    def _new_conn(self):
        sock = super()._new_conn()
        _track(sock)
        return sock

    def connect(self) -> None:
        super().connect()
        _track(self.sock)


def _track(sock) -> None:
    watch = getattr(_current, "watch", None)
    if watch is not None:
        watch.track(sock)


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if type(manager) is ProxyManager:  # an http(s) proxy; SOCKS managers keep their own pools
            manager.pool_classes_by_scheme = _POOLS
        return manager


def _session() -> requests.Session:
    session = requests.Session()
    adapter = _WatchedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def post_json(url: str, payload: object, *, headers: dict[str, str], timeout_s: float,
              max_bytes: int = MAX_REPLY_BYTES) -> Reply:
    """POST ``payload`` as JSON to ``url`` within ``timeout_s`` seconds in all (module docstring).

    Raises: ``DeadlineExceeded`` (a ``requests.Timeout``), ``requests.Timeout`` (connect),
    ``requests.ConnectionError``, ``ReplyTooLarge``, or another ``requests.RequestException``
    (an invalid URL, ...). Non-200 replies are returned, their body unread.
    """
    deadline = time.monotonic() + timeout_s
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", **headers, "Accept-Encoding": "identity"}
    watch = _Watch()
    timer = threading.Timer(timeout_s, watch.expire)
    timer.daemon = True
    _current.watch = watch
    timer.start()
    try:
        with _session() as session:
            response = session.post(url, data=data, headers=headers, timeout=(timeout_s, timeout_s), stream=True)
            try:
                body = _read_body(response, deadline, max_bytes) if response.status_code == 200 else b""
            finally:
                response.close()  # a body not read to its end: the connection is closed, not drained
    except requests.RequestException as error:
        if watch.expired:
            raise DeadlineExceeded(f"no full reply within {timeout_s:g} s") from error
        raise
    finally:
        _current.watch = None
        watch.finish()
        timer.cancel()
    if watch.expired:  # a body without Content-Length ends at the shutdown, cut short
        raise DeadlineExceeded(f"no full reply within {timeout_s:g} s")
    return Reply(response.status_code, body)


def _read_body(response: requests.Response, deadline: float, max_bytes: int) -> bytes:
    length = response.headers.get("Content-Length", "").strip()
    if length.isdigit() and int(length) > max_bytes:
        raise ReplyTooLarge(f"the reply declares {length} bytes, over the {max_bytes}-byte cap")
    body = bytearray()
    try:
        for chunk in response.raw.stream(CHUNK_BYTES, decode_content=False):
            body += chunk
            if len(body) > max_bytes:
                raise ReplyTooLarge(f"the reply is over the {max_bytes}-byte cap")
            if time.monotonic() > deadline:
                raise DeadlineExceeded("the reply did not end before the deadline")
    except urllib3.exceptions.ReadTimeoutError as error:
        raise requests.ReadTimeout(str(error)) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise requests.ConnectionError(f"the reply was cut off: {error}") from error
    return bytes(body)


_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")


def short_cause(error: BaseException) -> str:
    """A short reason for a failed request: '[Errno 111] Connection refused', else the type name."""
    found = _ERRNO.search(str(error))
    return found.group(0).strip() if found else type(error).__name__
