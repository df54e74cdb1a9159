"""Tests of hvdrun's rendezvous store (runner/rendezvous.py) over real TCP on 127.0.0.1:
every op, blocking GETs, the secret, and hostile or broken clients (bad magic, huge lengths,
garbage, a client stalling mid-request), after each of which the server still serves others.

    python -m pytest test/runner/test_rendezvous.py
"""

import os
import socket
import struct
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store_client as sc  # noqa: E402

from horovod_cpp.runner import rendezvous  # noqa: E402

SECRET = "ab" * 32


@pytest.fixture
def store():
    s = rendezvous.StoreServer(SECRET, idle_timeout=1.0).start()
    yield s
    s.stop()


def client(store, secret=SECRET):
    return sc.Client("127.0.0.1", store.port, secret, timeout_s=10)


def raw(store):
    return socket.create_connection(("127.0.0.1", store.port), timeout=10)


def closed(sock):
    """True when the server has closed the connection (EOF or reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def assert_still_serves(store):
    c = client(store)
    assert c.set("alive", b"yes") == "OK"
    assert c.get("alive", 0) == ("OK", b"yes")
    c.close()


def test_listens_on_loopback_only(store):
    assert store.address[0] == "127.0.0.1" and store.port > 0


def test_set_get_check_add(store):
    c = client(store)
    assert c.check("k") == "NOT_FOUND"
    assert c.get("k", 0) == ("TIMEOUT", b"")
    assert c.set("k", b"v1") == "OK"
    assert c.check("k") == "OK"
    assert c.get("k", 0) == ("OK", b"v1")
    assert c.set("k", b"") == "OK"  # SET overwrites, empty values too
    assert c.get("k", 0) == ("OK", b"")
    big = bytes(range(256)) * 4096  # 1 MiB, every byte value
    assert c.set("big/value", big) == "OK"
    assert c.get("big/value", 0) == ("OK", big)
    assert c.add("n", 5) == ("OK", 5)
    assert c.add("n", -7) == ("OK", -2)
    assert c.add("n", 1 << 40) == ("OK", (1 << 40) - 2)
    assert c.get("n", 0) == ("OK", struct.pack("<q", (1 << 40) - 2))
    assert store.get("k", 0) == b"" and store.check("n")
    c.close()


def test_add_from_many_clients_is_atomic(store):
    def work():
        c = client(store)
        for _ in range(50):
            assert c.add("counter", 1)[0] == "OK"
        c.close()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client(store).add("counter", 0) == ("OK", 400)


def test_get_blocks_until_set(store):
    c = client(store)
    got = {}

    def waiter():
        t0 = time.monotonic()
        got["answer"] = c.get("later", 10000)
        got["waited"] = time.monotonic() - t0

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    assert "answer" not in got
    other = client(store)
    assert other.set("later", b"now") == "OK"
    t.join(5)
    assert got["answer"] == ("OK", b"now")
    assert 0.25 < got["waited"] < 5


def test_get_times_out(store):
    c = client(store)
    t0 = time.monotonic()
    assert c.get("never", 400) == ("TIMEOUT", b"")
    assert 0.35 < time.monotonic() - t0 < 3
    assert c.check("alive") == "NOT_FOUND"  # the connection goes on after a TIMEOUT


def test_in_process_set_wakes_a_get(store):
    c = client(store)
    threading.Timer(0.2, store.set, args=("assign/h1:0/1", "0,2,0,1,0,2,1")).start()
    assert c.get("assign/h1:0/1", 10000) == ("OK", b"0,2,0,1,0,2,1")


def test_wrong_secret_is_denied_and_closed(store):
    for secret in ["cd" * 32, "", SECRET[:-1], SECRET + "0"]:
        c = client(store, secret)
        status, msg = c.call(sc.SET, "k", b"v")
        assert status == "DENIED" and b"secret" in msg, (secret, status, msg)
        assert closed(c.sock)
    assert client(store).check("k") == "NOT_FOUND"  # nothing was written
    assert_still_serves(store)


def test_refusal_reaches_a_client_that_sent_a_whole_request(store):
    """The refusal is read by the client even with a large unread value behind it (the store
    reads and drops the rest before closing, so no reset overtakes the answer)."""
    for _ in range(20):
        c = client(store, "cd" * 32)
        c.sock.sendall(sc.request(sc.SET, "k", b"x" * (1 << 20), c.secret))
        assert sc.read_response(c.sock)[0] == "DENIED"
        assert closed(c.sock)
    assert_still_serves(store)


def test_wrong_secret_is_refused_before_the_value_is_read(store):
    """A client without the secret announcing 16 MiB gets DENIED before sending any of it."""
    s = raw(store)
    s.sendall(struct.pack("<IBI", sc.MAGIC, sc.SET, 0) + struct.pack("<I", 3) + b"bad"
              + struct.pack("<I", 1) + b"k" + struct.pack("<I", 16 << 20))
    assert sc.read_response(s)[0] == "DENIED"
    assert closed(s)


@pytest.mark.parametrize("payload, word", [
    (struct.pack("<IBI", 0x12345678, sc.SET, 0), "magic"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "magic"),
    (struct.pack("<IBI", sc.MAGIC, 9, 0), "op"),
    (struct.pack("<IBI", sc.MAGIC, sc.SET, 0) + struct.pack("<I", 0xFFFFFFFF), "secret"),
    (sc.request(sc.SET, "k", b"", SECRET)[:-4] + struct.pack("<I", (16 << 20) + 1), "value"),
    (sc.request(sc.SET, "x" * 4097, b"", SECRET), "key"),
    (sc.request(sc.SET, "", b"", SECRET), "empty key"),
    (sc.request(sc.SET, "has space", b"", SECRET), "printable"),
    (sc.request(sc.SET, b"bad\x00key", b"", SECRET), "printable"),
    (sc.request(sc.ADD, "n", b"1234", SECRET), "8-byte"),
    (sc.request(sc.GET, "k", b"v", SECRET), "0-byte"),
])
def test_bad_requests_are_refused_and_closed(store, payload, word):
    s = raw(store)
    s.sendall(payload)
    status, msg = sc.read_response(s)
    assert status == "BAD_REQUEST" and word.encode() in msg, (status, msg)
    assert closed(s)
    assert_still_serves(store)


def test_add_on_a_non_counter_is_refused(store):
    c = client(store)
    c.set("text", b"abc")
    status, msg = c.add("text", 1)
    assert status == "BAD_REQUEST" and b"counter" in msg
    c = client(store)
    c.add("max", (1 << 63) - 1)
    assert c.add("max", 1)[0] == "BAD_REQUEST"
    assert_still_serves(store)


def test_random_garbage_never_crashes_the_server(store):
    import random
    rng = random.Random(36)
    for _ in range(200):
        s = raw(store)
        good = sc.request(rng.choice([sc.SET, sc.GET, sc.ADD, sc.CHECK]), "k", b"", SECRET)
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        s.settimeout(5)
        try:
            s.sendall(bytes(data[:rng.randint(1, len(data))]))
            s.shutdown(socket.SHUT_WR)  # a client that sent all it will send
            while s.recv(4096):
                pass
        except OSError:
            pass  # refused and closed already (reset), or waiting for more (timeout)
        s.close()
    assert_still_serves(store)


def test_client_stalling_mid_request_is_dropped(store):
    """idle_timeout is 1 s in this fixture (30 s in hvdrun)."""
    s = raw(store)
    s.sendall(sc.request(sc.SET, "k", b"value", SECRET)[:12])
    t0 = time.monotonic()
    s.settimeout(10)
    assert closed(s)
    assert 0.8 < time.monotonic() - t0 < 5
    assert_still_serves(store)


def test_client_idle_between_requests_is_kept(store):
    c = client(store)
    time.sleep(2.0)  # twice the idle limit, but not in the middle of a request
    assert c.set("k", b"v") == "OK"


def test_stop_wakes_waiters_and_closes():
    s = rendezvous.StoreServer(SECRET).start()
    c = client(s)
    result = {}

    def waiter():
        try:
            result["r"] = c.get("never", 60000)
        except (ConnectionError, OSError) as e:
            result["r"] = e

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    s.stop()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 3
    assert isinstance(result["r"], (ConnectionError, OSError)), result
    with pytest.raises(OSError):
        client(s)


def test_bad_secret_argument():
    with pytest.raises(ValueError):
        rendezvous.StoreServer("")
    with pytest.raises(ValueError):
        rendezvous.StoreServer("x" * 257)


def test_many_clients_at_once(store):
    """64 workers connecting and waiting on one key at the same moment, as at init()."""
    results = []

    def worker(i):
        c = client(store)
        assert c.add("arrived", 1)[0] == "OK"
        results.append(c.get("go", 20000))
        c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(64)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while store.get("arrived", 0) != struct.pack("<q", 64):
        assert time.monotonic() - t0 < 20
        time.sleep(0.01)
    store.set("go", "1")
    for t in threads:
        t.join(10)
    assert results == [("OK", b"1")] * 64


def test_resolver_answers_missing_keys():
    asked = []

    def resolve(key):
        asked.append(key)
        return "made" if key.startswith("auto/") else None

    with rendezvous.StoreServer(SECRET, resolve=resolve) as s:
        c = client(s)
        assert c.get("auto/1", 0) == ("OK", b"made")
        assert c.check("auto/2") == "OK"
        assert c.get("plain", 100) == ("TIMEOUT", b"")
        assert c.set("auto/3", b"set") == "OK"
        assert c.get("auto/3", 0) == ("OK", b"set")  # a stored value wins; not asked
        assert c.get("auto/1", 0) == ("OK", b"made")  # kept; not asked again
    assert asked == ["auto/1", "auto/2", "plain"]
