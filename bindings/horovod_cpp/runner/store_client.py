"""A Python client of the rendezvous store (rendezvous.py; the wire protocol of the Gloo
contract, docs/running.md).

The library's own client is C++ (the Gloo World). This one is what `horovod_cpp.run`'s workers
use to fetch the function and hand back its value (run_func.py), and what the tests and their
tiny worker programs use to speak to hvdrun's store. Standard library only, no import of the
compiled module: test workers load it by path (test/runner/store_client.py).
"""

import os
import socket
import struct

MAGIC = 0x53445648
SET, GET, ADD, CHECK = 1, 2, 3, 4
STATUS = {0: "OK", 1: "TIMEOUT", 2: "NOT_FOUND", 3: "DENIED", 4: "BAD_REQUEST"}


def request(op, key, value=b"", secret="", timeout_ms=0):
    """The bytes of one request."""
    secret = secret.encode() if isinstance(secret, str) else secret
    key = key.encode() if isinstance(key, str) else key
    value = value.encode() if isinstance(value, str) else value
    return (struct.pack("<IBI", MAGIC, op, timeout_ms) + struct.pack("<I", len(secret)) + secret
            + struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"store closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_response(sock):
    """(status name, value bytes)."""
    status, n = struct.unpack("<BI", recv_exact(sock, 5))
    return STATUS.get(status, str(status)), recv_exact(sock, n)


class Client:
    """One persistent connection; each call sends one request and reads its answer."""

    def __init__(self, addr, port, secret, timeout_s=30.0):
        self.sock = socket.create_connection((addr, int(port)), timeout=timeout_s)
        self.secret = secret

    @classmethod
    def from_env(cls, env=None):
        env = os.environ if env is None else env
        return cls(env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"],
                   env["HOROVOD_CPP_RENDEZVOUS_SECRET"])

    def call(self, op, key, value=b"", timeout_ms=0):
        self.sock.sendall(request(op, key, value, self.secret, timeout_ms))
        return read_response(self.sock)

    def set(self, key, value):
        return self.call(SET, key, value)[0]

    def get(self, key, timeout_ms):
        return self.call(GET, key, timeout_ms=timeout_ms)

    def add(self, key, delta):
        status, value = self.call(ADD, key, struct.pack("<q", delta))
        return status, (struct.unpack("<q", value)[0] if status == "OK" else value)

    def check(self, key):
        return self.call(CHECK, key)[0]

    def close(self):
        self.sock.close()
