"""``chunking`` and ``chunking_writes``: a seeded loop's stream reads and sends cut at drawn places.

A stream socket hands a reader whatever has arrived, up to what it asked
for; where one read ends and the next begins is the kernel's business, and
a protocol or a ``StreamReader`` must cope with any split (asyncio promises
nothing about it).  A seeded loop with ``chunking`` on draws the split: a
read takes ``min(available, drawn)`` bytes, the drawn size biased towards
small ones, so code that assumes one ``data_received`` per message fails
under some seed.  Bytes are never lost or reordered: a read only takes
fewer, and the rest stays queued in the kernel for the next one.

``chunking_writes`` does the same to sends: a stream socket's ``send``
and ``sendmsg`` may take any part of what they are offered, so a transport
must keep the rest buffered, call ``pause_writing`` past its high-water
mark and let ``drain()`` wait; a drawn cap makes that happen on a fast
loopback too.  Only the cap is drawn: the kernel may still take less.

OS facts relied on (Linux):

- ``ioctl(fd, FIONREAD)`` on a TCP or Unix stream socket says how many
  bytes are queued for reading; the fd stays readable (level-triggered)
  while any remain, so the poll reports it again.
- Only stream sockets are cut.  A datagram read takes one whole datagram
  and drops what does not fit, and a datagram send sends one whole
  datagram, so datagram sockets keep their reads and sends as they are
  (datagram boundaries are never perturbed).
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
from typing import Any

from .seeding import Schedule

__all__ = ["ChunkedSocket", "Chunking", "SendingInChunks", "WriteChunking"]

# A read or send takes everything it may with this probability; otherwise a
# size drawn log-uniformly below it (1 byte about as likely as 2-3 or 4-7...).
_WHOLE_PROBABILITY = 0.25
_INT = struct.Struct("i")
_ZERO = bytes(_INT.size)


def _queued(fd: int) -> int:
    """Bytes waiting to be read on the stream socket ``fd`` (0 if the kernel won't say)."""
    try:
        return int(_INT.unpack(fcntl.ioctl(fd, termios.FIONREAD, _ZERO))[0])
    except OSError:
        return 0


class Chunking:
    """The ``chunking`` policy of one seeded loop: how much each stream read may take."""

    __slots__ = ("_schedule", "_perturbed", "_stream")

    def __init__(self, schedule: Schedule, perturbed: Any) -> None:
        self._schedule = schedule
        self._perturbed = perturbed  # its iteration numbers the decisions
        self._stream = schedule.stream("chunking")

    def size(self, fd: int, wanted: int) -> int:
        """How many of the ``wanted`` bytes a read of the stream socket ``fd`` takes now."""
        # Two draws whatever happens, so a read that finds a different amount
        # queued (a peer outside the loop) leaves later draws where they were.
        available = _queued(fd)
        limit = min(available, wanted)
        taken = _drawn_part(self._stream, limit)
        if taken == limit:
            return wanted
        self._schedule.record(
            self._perturbed.iteration, "chunking", f"fd {fd} read {taken} of {available} bytes"
        )
        return taken

    def size_for(self, sock: socket.socket, wanted: int) -> int:
        """``size`` for ``sock``, or ``wanted`` unchanged when ``sock`` is not a stream."""
        if wanted <= 1 or sock.type != socket.SOCK_STREAM:
            return wanted
        return self.size(sock.fileno(), wanted)

    def view(self, sock: socket.socket) -> Any:
        """``sock`` as ``sock_recv``/``sock_recv_into`` should read it: chunked if a stream."""
        if sock.type != socket.SOCK_STREAM:
            return sock  # datagrams are never cut
        return ChunkedSocket(sock, self)


class ChunkedSocket:
    """A stream socket seen through ``Chunking``: each read takes a drawn size at most.

    Just what the ``sock_recv``/``sock_recv_into`` operations use of a
    socket, so a seeded loop runs those very operations on it.  Each read
    looks the socket's method up again, as they do (code may replace it
    while a read waits).
    """

    __slots__ = ("_sock", "_chunking")

    def __init__(self, sock: socket.socket, chunking: Chunking) -> None:
        self._sock = sock
        self._chunking = chunking

    def __repr__(self) -> str:
        return repr(self._sock)

    def fileno(self) -> int:
        return self._sock.fileno()

    def gettimeout(self) -> float | None:
        return self._sock.gettimeout()

    def recv(self, n: int) -> bytes:
        return self._sock.recv(self._chunking.size_for(self._sock, n))

    def recv_into(self, buf: Any, nbytes: int = 0) -> int:
        wanted = nbytes or memoryview(buf).nbytes
        return self._sock.recv_into(buf, self._chunking.size_for(self._sock, wanted))


def _drawn_part(stream: Any, offered: int) -> int:
    """A size in 1..offered, small ones favoured; two draws whatever the outcome."""
    whole = stream.random() < _WHOLE_PROBABILITY
    fraction = stream.random()
    if whole or offered <= 1:
        return offered
    return max(1, min(offered - 1, int(offered**fraction)))


class WriteChunking:
    """The ``chunking_writes`` policy of one seeded loop: how much each stream send may take."""

    __slots__ = ("_schedule", "_perturbed", "_stream")

    def __init__(self, schedule: Schedule, perturbed: Any) -> None:
        self._schedule = schedule
        self._perturbed = perturbed
        self._stream = schedule.stream("chunking_writes")

    def cap(self, fd: int, offered: int) -> int:
        """How many of the ``offered`` bytes a send on the stream socket ``fd`` may take."""
        taken = _drawn_part(self._stream, offered)
        if taken < offered:
            self._schedule.record(
                self._perturbed.iteration,
                "chunking_writes",
                f"fd {fd} send at most {taken} of {offered} bytes",
            )
        return taken

    def view(self, sock: Any) -> Any:
        """``sock`` with its sends capped, if it is a stream socket; else ``sock`` itself."""
        if sock.type != socket.SOCK_STREAM:
            return sock  # a datagram is sent whole or not at all
        return SendingInChunks(sock, self)


class SendingInChunks:
    """A stream socket whose ``send``/``sendmsg`` take a drawn part of what they are offered.

    Everything else is the socket's own: a seeded loop's stream transports
    hold one of these as their socket, and its ``sock_sendall`` runs on one.
    """

    __slots__ = ("_sock", "_policy")

    def __init__(self, sock: socket.socket, policy: WriteChunking) -> None:
        self._sock = sock
        self._policy = policy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def __repr__(self) -> str:
        return repr(self._sock)

    def send(self, data: Any, flags: int = 0) -> int:
        view = memoryview(data).cast("B")
        cap = self._policy.cap(self._sock.fileno(), view.nbytes)
        return self._sock.send(view[:cap], flags)

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        views = [memoryview(buffer).cast("B") for buffer in buffers]
        left = self._policy.cap(self._sock.fileno(), sum(view.nbytes for view in views))
        capped = []
        for view in views:
            if left <= 0:
                break
            capped.append(view[:left])
            left -= view.nbytes
        return self._sock.sendmsg(capped, *args)
