"""The rendezvous store that `hvdrun --gloo` serves to its workers (issue 36).

A small key-value store over TCP, speaking the wire protocol of the Gloo contract
(docs/running.md, "Gloo"): every request carries the job's secret, is bounded in size, and is
answered in order on one persistent connection per client. The library's Gloo World (C++) is
the client; hvdrun, and any harness that manages membership, write keys in process through
`StoreServer.set`.

Standard library only, and no import of the compiled module: the store must run where only
the launcher is installed (a Kubernetes or Ray driver).
"""

import hmac
import socket
import socketserver
import struct
import threading
import time

MAGIC = 0x53445648  # b"HVDS" read as a little-endian u32

OP_SET, OP_GET, OP_ADD, OP_CHECK = 1, 2, 3, 4
OK, TIMEOUT, NOT_FOUND, DENIED, BAD_REQUEST = 0, 1, 2, 3, 4

MAX_SECRET = 256
MAX_KEY = 4096
MAX_VALUE = 16 * 1024 * 1024

#: A client that sends part of a request and then nothing for this long is dropped.
IDLE_TIMEOUT_S = 30.0

_HEADER = struct.Struct("<IBI")  # magic, op, timeout_ms
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
#: How often a connection waiting between requests looks at the stop flag.
_POLL_S = 0.5


class _Dropped(Exception):
    """The connection ends here: peer closed, idle mid-request, or the server stops."""


class _Refused(Exception):
    """A request answered with `status` and a message, after which the connection is closed."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class StoreServer:
    """The store: start() it, read `port`, give workers the address and secret, stop() it.

    `host` is the only address listened on (127.0.0.1 for a job on this host, the launcher's
    address on the job's network otherwise); `port` 0 picks a free port. The secret is compared
    in constant time; a wrong one is answered DENIED and the connection closed.
    """

    def __init__(self, secret, host="127.0.0.1", port=0, idle_timeout=IDLE_TIMEOUT_S,
                 resolve=None):
        """`resolve(key: str)`, when given, is asked for a key that GET or CHECK does not
        find; bytes it returns become the key's value (None: still absent). hvdrun answers
        every `assign/<id>/<n>` of a fixed job with it."""
        if not secret or len(secret.encode()) > MAX_SECRET:
            raise ValueError(f"the secret must be 1 to {MAX_SECRET} bytes")
        self._secret = secret.encode()
        self._resolve = resolve
        self._idle_timeout = idle_timeout
        self._data = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._conns = set()
        self._server = _TCPServer((host, port), _Handler, self)
        self._thread = None

    @property
    def address(self):
        """(host, port) actually listened on."""
        return self._server.server_address[:2]

    @property
    def port(self):
        return self._server.server_address[1]

    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": _POLL_S},
                                        name="hvdrun-store", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stops listening, wakes every blocked GET and closes every connection."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- the store itself (also used in process by hvdrun and test harnesses) -------------
    def set(self, key, value):
        """Sets `key` (str) to `value` (bytes or str) and wakes the GETs waiting for it."""
        if isinstance(value, str):
            value = value.encode()
        with self._cond:
            self._data[key.encode() if isinstance(key, str) else key] = bytes(value)
            self._cond.notify_all()

    def get(self, key, timeout_s):
        """The value of `key`, waiting up to `timeout_s`; None on timeout or stop."""
        key = key.encode() if isinstance(key, str) else key
        with self._cond:
            self._resolve_locked(key)
            self._cond.wait_for(lambda: key in self._data or self._stopping, timeout_s)
            return self._data.get(key)

    def _resolve_locked(self, key):
        if self._resolve is not None and key not in self._data:
            value = self._resolve(key.decode("ascii"))
            if value is not None:
                self._data[key] = value.encode() if isinstance(value, str) else bytes(value)

    def add(self, key, delta):
        """Adds `delta` to the int64 counter `key` (absent = 0); returns the new total."""
        key = key.encode() if isinstance(key, str) else key
        with self._cond:
            old = self._data.get(key, _I64.pack(0))
            if len(old) != 8:
                raise _Refused(BAD_REQUEST, "ADD on a key whose value is not an 8-byte counter")
            total = _I64.unpack(old)[0] + delta
            if not -(1 << 63) <= total < (1 << 63):
                raise _Refused(BAD_REQUEST, "ADD overflows the int64 counter")
            self._data[key] = _I64.pack(total)
            self._cond.notify_all()
            return total

    def check(self, key):
        key = key.encode() if isinstance(key, str) else key
        with self._cond:
            self._resolve_locked(key)
            return key in self._data

    # ---- serving ---------------------------------------------------------------------------
    def _serve(self, conn):
        with self._cond:
            if self._stopping:
                return
            self._conns.add(conn)
        try:
            while True:
                try:
                    status, value = self._answer(_Reader(conn, self))
                except _Refused as e:
                    _send(conn, e.status, str(e).encode())
                    _linger(conn)
                    return
                _send(conn, status, value)
        except (_Dropped, OSError):
            return
        finally:
            with self._cond:
                self._conns.discard(conn)

    def _answer(self, rd):
        magic, op, timeout_ms = _HEADER.unpack(rd.read(_HEADER.size, first=True))
        if magic != MAGIC:
            raise _Refused(BAD_REQUEST, f"bad magic 0x{magic:08x} (expected 0x{MAGIC:08x})")
        if op not in (OP_SET, OP_GET, OP_ADD, OP_CHECK):
            raise _Refused(BAD_REQUEST, f"unknown op {op} (1 SET, 2 GET, 3 ADD, 4 CHECK)")
        secret = rd.read(rd.length("secret", MAX_SECRET))
        # The secret is checked before the key and value are read: a client without it never
        # makes the server hold more than MAX_SECRET bytes.
        if not hmac.compare_digest(secret, self._secret):
            raise _Refused(DENIED, "wrong secret")
        key_len = rd.length("key", MAX_KEY)
        if key_len == 0:
            raise _Refused(BAD_REQUEST, "empty key")
        key = rd.read(key_len)
        if any(b < 0x21 or b > 0x7E for b in key):
            raise _Refused(BAD_REQUEST, "key has a byte outside printable ASCII 0x21-0x7e")
        value_len = rd.length("value", MAX_VALUE)
        want = {OP_ADD: 8, OP_GET: 0, OP_CHECK: 0}.get(op)
        if want is not None and value_len != want:
            raise _Refused(BAD_REQUEST, f"op {op} takes a {want}-byte value, got {value_len}")
        value = rd.read(value_len)
        if op == OP_SET:
            self.set(key, value)
            return OK, b""
        if op == OP_ADD:
            return OK, _I64.pack(self.add(key, _I64.unpack(value)[0]))
        if op == OP_CHECK:
            return (OK if self.check(key) else NOT_FOUND), b""
        got = self.get(key, timeout_ms / 1000.0)
        if got is None:
            if self._stopping:
                raise _Dropped()
            return TIMEOUT, b""
        return OK, got


class _Reader:
    """Reads exact byte counts from a connection, with the idle rule and the stop flag."""

    def __init__(self, conn, store):
        self._conn = conn
        self._store = store

    def read(self, n, first=False):
        """`n` bytes. Before the first byte of a request the wait is unbounded (a worker may be
        quiet for hours between requests); after it, IDLE_TIMEOUT_S without a byte drops."""
        chunks, got = [], 0
        last = time.monotonic()
        while got < n:
            if self._store._stopping:
                raise _Dropped()
            try:
                chunk = self._conn.recv(min(n - got, 1 << 20))
            except socket.timeout:
                if not (first and got == 0) and time.monotonic() - last > self._store._idle_timeout:
                    raise _Dropped() from None
                continue
            if not chunk:
                raise _Dropped()
            chunks.append(chunk)
            got += len(chunk)
            last = time.monotonic()
        return b"".join(chunks)

    def length(self, what, bound):
        n = _U32.unpack(self.read(4))[0]
        if n > bound:
            raise _Refused(BAD_REQUEST, f"{what} length {n} is over the limit {bound}")
        return n


def _send(conn, status, value):
    conn.sendall(struct.pack("<BI", status, len(value)) + value)


#: After a refusal, how long and how much of the rest of the request is read and discarded.
_LINGER_S = 2.0
_LINGER_BYTES = MAX_VALUE + 2 * MAX_KEY


def _linger(conn):
    """Closing a socket with unread bytes makes the kernel send a reset, which can reach the
    client before it has read the refusal. So the rest of the request is read and thrown away
    (bounded in time and bytes; nothing is kept) after our side is shut, then it is closed."""
    try:
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + _LINGER_S
        left = _LINGER_BYTES
        while left > 0 and time.monotonic() < deadline:
            try:
                chunk = conn.recv(min(left, 1 << 16))
            except socket.timeout:
                continue
            if not chunk:
                return
            left -= len(chunk)
    except OSError:
        pass


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Every worker of a job connects at once at init(); the default backlog of 5 would make
    # the kernel drop the rest's SYNs and retry them a second or more later.
    request_queue_size = 1024

    def __init__(self, address, handler, store):
        self.store = store
        super().__init__(address, handler)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(min(_POLL_S, self.server.store._idle_timeout))
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.store._serve(self.request)
