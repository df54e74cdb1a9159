"""Point-to-point messages (send/recv) of the torch.distributed backend "horovod_cpp".

horovod_cpp's engine runs collectives only: every rank of a set takes part in each. torch's
send and recv are between two ranks, so this backend carries them through the store torch
gives each group (a TCP server on rank 0, or the torchrun agent's): the sender writes the
message under a key, the receiver looks for that key until the message is there, then
deletes it. Keys name the group's sender and receiver ranks, the tag and a sequence number
that each side counts per (peer, tag), so messages between two ranks with one tag arrive in
the order they were sent, as torch's other backends guarantee. Each message carries its dtype and shape: a
receive into a tensor of another dtype or size fails on the receiver with both named, and the
message is consumed so that the next receive pairs with the next message.

What this is for: messages of control size (a tensor of results passed to rank 0, a flag or a
few numbers between two ranks). Every byte passes through the store's server, so bulk
traffic (pipeline-parallel activations) belongs on a backend with direct links (gloo, NCCL).
"""

import ast
import threading
import time

import torch

#: The longest pause between two looks at the store while a receive waits (it starts at none
#: and doubles from 20 µs).
_MAX_PAUSE_S = 0.001


def encode(tensor):
    """A tensor as one message: its dtype and shape, a newline, its bytes."""
    flat = tensor.detach().contiguous().cpu().reshape(-1)
    header = repr((str(flat.dtype).replace("torch.", ""), tuple(tensor.shape))).encode()
    return header + b"\n" + flat.view(torch.uint8).numpy().tobytes()


def describe(dtype_name, shape):
    """'float32[3, 4]'."""
    return f"{dtype_name}[{', '.join(str(d) for d in shape)}]"


def decode_into(message, tensor, what):
    """Copies a message into `tensor`; ValueError (starting with `what`) when its dtype or
    shape differs from the tensor's."""
    header, _, payload = message.partition(b"\n")
    dtype_name, shape = ast.literal_eval(header.decode())
    want = (str(tensor.dtype).replace("torch.", ""), tuple(tensor.shape))
    if (dtype_name, tuple(shape)) != want:
        raise ValueError(f"{what}: the message is {describe(dtype_name, shape)}, the receiving "
                         f"tensor {describe(*want)} (the message is consumed)")
    if tensor.numel() == 0:
        return
    received = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    tensor.copy_(received.view(tensor.dtype).view(tensor.shape))


#: What store.compare_set answers for a key that does not exist (no message starts so).
_ABSENT = b"\x00absent"


class Mailbox:
    """The point-to-point messages of one group (its ranks, its torch store).

    Each (sender, receiver, tag) is a channel whose message n has its own key. A receive looks
    for its key with store.compare_set(key, _ABSENT, _ABSENT), which never blocks, never
    creates the key, and answers the message itself once it is there: one round trip per
    look. (torch 1.13's store.wait() with a timeout leaves the store's connection unusable
    when it times out, and its Python store has no check().)"""

    def __init__(self, store, rank):
        self._store = store
        self._rank = rank
        self._lock = threading.Lock()
        self._sent = {}      # (dst, tag) -> messages sent
        self._expected = {}  # (src, tag) -> receives posted
        self._arrived = {}   # key -> message seen by a look, not taken yet

    def _next(self, counts, peer, tag):
        with self._lock:
            n = counts.get((peer, tag), 0)
            counts[(peer, tag)] = n + 1
        return n

    @staticmethod
    def _key(src, dst, tag, n):
        return f"horovod_cpp/p2p/{src}->{dst}/{tag}/{n}"

    def post(self, tensor, dst, tag):
        """Sends `tensor` to rank `dst` of the group (returns once the store holds it)."""
        self._store.set(self._key(self._rank, dst, tag, self._next(self._sent, dst, tag)),
                        encode(tensor))

    def expect(self, src, tag):
        """The key of the next message from `src` with `tag`, reserved for one receive."""
        return self._key(src, self._rank, tag, self._next(self._expected, src, tag))

    def arrived(self, key):
        """Whether the message under `key` is there (one look at the store)."""
        with self._lock:
            if key in self._arrived:
                return True
        message = self._store.compare_set(key, _ABSENT, _ABSENT)
        if message == _ABSENT:
            return False
        with self._lock:
            self._arrived[key] = message
        return True

    def wait(self, key, seconds):
        """Whether the message under `key` arrived within `seconds` (None: no limit)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        pause = 0.0
        while not self.arrived(key):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(max(2 * pause, 20e-6), _MAX_PAUSE_S)
        return True

    def take(self, key, tensor, what):
        """Copies the (arrived) message under `key` into `tensor` and deletes it."""
        with self._lock:
            message = self._arrived.pop(key)
        self._store.delete_key(key)
        decode_into(message, tensor, what)
