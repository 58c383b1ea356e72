"""The census of outside work: what can still wake an idle loop, and from where.

Virtual time asks ``external_work()`` before it jumps (work outside the
loop's tasks that is under way holds the jump), and the deadlock check asks
``wake_sources()`` to tell a wait from a deadlock; ``describe_fd()`` names
fds in reports.  All three run in the loop thread while it is idle, so they
may make system calls but never block, and they cost nothing otherwise: the
loop's parts keep only a record per executor job, blocking call and child
(``Loop._unfinished_work()``), and sockets are asked the kernel's view.

OS facts this module relies on (Linux; checked on the kernels snakeloop
runs on with small experiments):

* ``getsockopt(IPPROTO_TCP, TCP_INFO)`` returns ``struct tcp_info``
  (``linux/tcp.h``), at most as many bytes as asked for.  This module reads
  four fields at fixed offsets, all in native byte order: ``tcpi_state``
  (u8, offset 0: 1 ESTABLISHED, 2 SYN_SENT, 4 FIN_WAIT1, 5 FIN_WAIT2,
  10 LISTEN, ...), ``tcpi_unacked`` (u32, offset 24: segments sent and not
  acknowledged yet), ``tcpi_last_data_sent`` (u32, offset 44) and
  ``tcpi_last_data_recv`` (u32, offset 52): milliseconds since data was
  last sent or received, counted in jiffies (steps of 4 ms at HZ=250).
* Both times start at the connection's establishment, so a fresh
  connection reads as one that sent something just now and received
  nothing since: it holds the jump for one reply window, as a peer that
  speaks first (a banner, a request) would.  Two events in the same jiffy
  read as equal: then nothing proves that a reply came after the request,
  and the socket counts as awaiting one (a reply window of real time at
  worst, never a jump over a request in flight).
* A non-blocking ``connect()`` that has not completed leaves the socket in
  SYN_SENT with the SYN unacknowledged (``tcpi_unacked`` 1); its times are
  meaningless (counted from zero), and ``getpeername()`` fails with
  ENOTCONN, so the address it connects to cannot be named.  A loopback
  connect to a listener completes at once; it stays in SYN_SENT when the
  listener's accept queue is full (the SYN is dropped and resent after 1 s,
  3 s, ...) or when the address does not answer.
* ``getsockopt(SOL_SOCKET, SO_PEERCRED)`` on a connected AF_UNIX stream
  socket returns ``struct ucred`` (pid, uid, gid: three ints): the process
  that made the other end, at ``connect()``, ``listen()`` or
  ``socketpair()``; a socketpair's peer is this process.
* ``ioctl(SIOCOUTQ)`` (``TIOCOUTQ``) on an AF_UNIX stream socket returns
  the memory its sent data still takes in the peer's receive queue: not 0
  exactly while the peer has not read everything sent (a partial read keeps
  the whole buffer), 0 once it has.
* The accepted end of a TCP connection has the client's address as peer
  and, as local address, the address the client connected to, which is the
  listener's unless the listener is bound to a wildcard (0.0.0.0, ::):
  then only the port is the listener's.  An IPv4 peer of a dual-stack
  socket shows as an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``).
* ``/proc/self/fd/N`` links to ``socket:[inode]``, ``pipe:[inode]`` or
  ``anon_inode:[pidfd]`` (and ``/proc/self/fdinfo/N`` of a pidfd has a
  ``Pid:`` line).  ``socket.socket(fileno=fd)`` finds the family and type
  of an fd it did not make (``SO_DOMAIN``, ``SO_TYPE``); ``detach()`` lets
  go of it without closing it.  CPython's leaves the fd's blocking mode as
  it is; PyPy's sets it from the socket's timeout: the default (blocking),
  or non-blocking when the type given has ``SOCK_NONBLOCK``.

Peers inside the loop never count: a TCP socket whose peer address is the
local address of another socket of this loop (watched, or owned by one of
its transports, which is not watched while its reading is paused) or of
one of its listeners, and an AF_UNIX socket whose peer is this process.
Anything they send is seen by the loop's own polls.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import socket
import stat
import struct
import termios
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

__all__ = ["Pending", "describe_fd", "external_work", "wake_sources"]


class Pending(NamedTuple):
    """One piece of outside work, or one outside party, that can wake the loop."""

    kind: str
    """One of "executor", "blocking", "child", "spawn", "connect", "socket", "external",
    "thread"."""
    label: str
    """What it is, in words, for reports (``StallError`` shows it verbatim)."""
    since: float | None
    """``time.monotonic()`` when it began, if known."""


# -- what the kernel says about a socket ------------------------------------------

_TCP_ESTABLISHED = 1
_TCP_SYN_SENT = 2
_TCP_FIN_WAIT1 = 4
_TCP_FIN_WAIT2 = 5
# States in which data from the peer can still arrive.
_TCP_OPEN_FOR_REPLIES = frozenset({_TCP_ESTABLISHED, _TCP_FIN_WAIT1, _TCP_FIN_WAIT2})

_SOCK_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)
# tcpi_state (offset 0), tcpi_unacked (24), tcpi_last_data_sent (44),
# tcpi_last_data_recv (52).
_TCP_INFO = struct.Struct("=B23xI16xI4xI")
_TCP_INFO_OPT = getattr(socket, "TCP_INFO", None)
_SO_PEERCRED = getattr(socket, "SO_PEERCRED", None)
_UCRED = struct.Struct("=3i")
_SIOCOUTQ = getattr(termios, "TIOCOUTQ", None)
_INT = struct.Struct("=i")


class _TcpInfo(NamedTuple):
    state: int
    unacked: int
    ms_since_sent: int
    ms_since_received: int


class _Socket(NamedTuple):
    """What the census needs to know of one socket."""

    fd: int
    family: int
    type: int
    local: Any
    peer: Any  # None when not connected
    listening: bool
    tcp: _TcpInfo | None
    peer_pid: int | None  # AF_UNIX stream only
    reading: bool
    writing: bool


def _tcp_info(sock: socket.socket) -> _TcpInfo | None:
    if _TCP_INFO_OPT is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO_OPT, _TCP_INFO.size)
    except OSError:
        return None
    if len(raw) < _TCP_INFO.size:
        return None
    return _TcpInfo(*_TCP_INFO.unpack_from(raw))


def _peer_pid(sock: socket.socket) -> int | None:
    if _SO_PEERCRED is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, _UCRED.size)
    except OSError:
        return None
    pid = _UCRED.unpack(raw)[0]
    return pid if pid > 0 else None


def _unread_by_peer(fd: int) -> bool:
    """Whether an AF_UNIX stream socket's peer has not read all it was sent."""
    if _SIOCOUTQ is None:
        return False
    try:
        raw = fcntl.ioctl(fd, _SIOCOUTQ, bytes(_INT.size))
    except OSError:
        return False
    return bool(_INT.unpack(raw)[0])


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _socket_of(fd: int, fileobj: object) -> Iterator[socket.socket | None]:
    """A socket object for ``fd`` (the registered one, or a borrowed view), or None."""
    if isinstance(fileobj, socket.socket) and fileobj.fileno() == fd:
        yield fileobj
        return
    if not _is_socket(fd):
        yield None
        return
    try:
        blocking = os.get_blocking(fd)
        # A view that made a loop's fd blocking (PyPy) would block the loop at its next
        # accept() or read until EAGAIN: the type is given, with the fd's own mode, and
        # the real one read with SO_TYPE.
        view = socket.socket(type=0 if blocking else _SOCK_NONBLOCK, fileno=fd)
    except OSError:
        yield None
        return
    try:
        if view.getblocking() != blocking:  # a platform without SOCK_NONBLOCK
            view.setblocking(blocking)
        yield view
    finally:
        view.detach()  # the fd is not ours to close


def _read_socket(fd: int, fileobj: object, reading: bool, writing: bool) -> _Socket | None:
    with _socket_of(fd, fileobj) as sock:
        if sock is None:
            return None
        try:
            family = sock.family
            kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
            local = sock.getsockname()
            listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        except OSError:
            return None
        peer = None
        if not listening:
            with contextlib.suppress(OSError):
                peer = sock.getpeername()
        tcp = None
        peer_pid = None
        if family in (socket.AF_INET, socket.AF_INET6) and kind == socket.SOCK_STREAM:
            tcp = _tcp_info(sock)
        elif family == socket.AF_UNIX and kind == socket.SOCK_STREAM and not listening:
            peer_pid = _peer_pid(sock)
        return _Socket(fd, family, kind, local, peer, listening, tcp, peer_pid, reading, writing)


# -- addresses -------------------------------------------------------------------------


def _endpoint(addr: Any) -> tuple[str, int] | None:
    """``(ip, port)`` of an IP socket address, IPv4-mapped IPv6 as IPv4, or None."""
    if not isinstance(addr, tuple) or len(addr) < 2:
        return None
    host = addr[0]
    if not isinstance(host, str):
        return None
    if ":" in host:
        # IPv6: the kernel's text is canonical already, but for the mapped
        # IPv4 form and the scope, which ipaddress sorts out (rare: not
        # worth it for IPv4, the common case).
        try:
            ip = ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return (host, addr[1])
        mapped = ip.ipv4_mapped
        return (str(mapped if mapped is not None else ip), addr[1])
    return (host, addr[1])


def _format_ip(addr: Any) -> str:
    endpoint = _endpoint(addr)
    if endpoint is None:
        return str(addr)
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _format_unix(addr: Any) -> str:
    if isinstance(addr, bytes):
        # Linux's abstract namespace: a name that starts with a NUL byte.
        if addr.startswith(b"\0"):
            return "@" + addr[1:].decode("utf-8", "backslashreplace")
        return os.fsdecode(addr)
    return str(addr) if addr else ""


def _is_ip(host: str, quality: str) -> bool:
    """``ipaddress``'s ``is_loopback``, ``is_unspecified``... of ``host``; False if no IP."""
    try:
        return bool(getattr(ipaddress.ip_address(host), quality))
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host == "0.0.0.0" or (":" in host and _is_ip(host, "is_unspecified"))


def _is_loopback(host: str) -> bool:
    return host.startswith("127.") or (":" in host and _is_ip(host, "is_loopback"))


class _Inside:
    """The addresses of this loop's own TCP endpoints, for the peer-inside test."""

    def __init__(self, sockets: Iterable[_Socket]) -> None:
        self.addresses: set[tuple[str, int]] = set()
        self.wildcard_ports: set[int] = set()
        for sock in sockets:
            if sock.tcp is None:
                continue
            local = _endpoint(sock.local)
            if local is None:
                continue
            self.addresses.add(local)
            if sock.listening and _is_wildcard(local[0]):
                self.wildcard_ports.add(local[1])

    def holds_peer_of(self, sock: _Socket) -> bool:
        if sock.family == socket.AF_UNIX:
            return sock.peer_pid == os.getpid()
        peer = _endpoint(sock.peer)
        if peer is None:
            return False
        if peer in self.addresses:
            return True
        if peer[1] not in self.wildcard_ports:
            return False
        # A wildcard listener of ours on that port, if the peer is this host.
        local = _endpoint(sock.local)
        return _is_loopback(peer[0]) or (local is not None and local[0] == peer[0])


# -- the loop's sockets ----------------------------------------------------------------


def _watched_sockets(loop: Any) -> list[_Socket]:
    found = []
    for fd, fileobj, reading, writing in loop._watched_fds():
        sock = _read_socket(fd, fileobj, reading, writing)
        if sock is not None:
            found.append(sock)
    return found


def _transport_sockets(loop: Any, watched: set[int]) -> list[_Socket]:
    """Sockets of this loop's open transports that it does not watch (reading paused)."""
    found = []
    for fd in loop._transport_fds():
        if fd in watched:
            continue
        sock = _read_socket(fd, None, False, False)
        if sock is not None:
            found.append(sock)
    return found


class _Peers:
    """The peer-inside test, made on first use: most censuses need no address at all."""

    def __init__(self, loop: Any, watched: list[_Socket]) -> None:
        self._loop = loop
        self._watched = watched
        self._inside: _Inside | None = None

    def inside(self, sock: _Socket) -> bool:
        inside = self._inside
        if inside is None:
            watched = self._watched
            owned = _transport_sockets(self._loop, {sock.fd for sock in watched})
            inside = self._inside = _Inside([*watched, *owned])
        return inside.holds_peer_of(sock)


def _describe(sock: _Socket) -> str:
    if sock.family == socket.AF_UNIX:
        if sock.listening:
            return f"unix listener {_format_unix(sock.local)}"
        name = _format_unix(sock.local) or _format_unix(sock.peer)
        if name:
            return f"unix socket {name}"
        if sock.peer_pid == os.getpid():
            return "unix socketpair"
        if sock.peer_pid is not None:
            return f"unix socket to process {sock.peer_pid}"
        return "unix socket"
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        local = _format_ip(sock.local)
        if sock.listening:
            return f"listener {local}"
        prefix = "udp socket" if sock.type == socket.SOCK_DGRAM else "socket"
        if sock.peer is not None:
            return f"{prefix} {local} -> {_format_ip(sock.peer)}"
        if sock.tcp is not None and sock.tcp.state == _TCP_SYN_SENT:
            return f"{prefix} {local} connecting"
        return f"{prefix} {local}"
    return f"socket (family {sock.family}) fd {sock.fd}"


def _socket_work(sock: _Socket, reply_window: float, now: float) -> Pending | None:
    """What one watched socket waits for, if its peer is outside the loop.

    A connect in progress counts wherever it goes: the kernel finishes it
    (or gives up) in real time.
    """
    if sock.listening or sock.type != socket.SOCK_STREAM:
        return None
    tcp = sock.tcp
    if tcp is not None and tcp.state == _TCP_SYN_SENT:
        return Pending("connect", f"{_describe(sock)} (connect in progress)", None)
    if sock.peer is None:
        return None
    if sock.writing:
        return Pending("socket", f"{_describe(sock)} waiting to write", None)
    if tcp is not None:
        if tcp.state not in _TCP_OPEN_FOR_REPLIES:
            return None
        sent_at = now - tcp.ms_since_sent / 1000
        if tcp.unacked:
            return Pending("socket", f"{_describe(sock)} awaiting acknowledgement", sent_at)
        if tcp.ms_since_sent < reply_window * 1000 and tcp.ms_since_received >= tcp.ms_since_sent:
            return Pending("socket", f"{_describe(sock)} awaiting a reply", sent_at)
        return None
    if sock.family == socket.AF_UNIX and _unread_by_peer(sock.fd):
        return Pending("socket", f"{_describe(sock)} awaiting a reply (peer still reading)", None)
    return None


# -- the interface ---------------------------------------------------------------------


def external_work(
    loop: Any, *, reply_window: float, marks: Iterable[tuple[str, float]] = ()
) -> list[Pending]:
    """What is under way outside the loop's tasks and can still wake it: it holds a jump.

    The loop's parts' unfinished jobs (executor and ``to_thread`` jobs,
    name resolution, the loop's blocking calls, children and spawns); TCP
    connects in progress; sockets with a peer outside the loop that wait to
    write, have data in flight, or sent within ``reply_window`` real
    seconds and got nothing since (AF_UNIX: whose peer has not read all it
    was sent); and ``marks``, the ``(label, since)`` of open ``external()``
    blocks.
    """
    found: list[Pending] = list(loop._unfinished_work())
    watched = _watched_sockets(loop)
    peers = _Peers(loop, watched)
    now = time.monotonic()
    for sock in watched:
        work = _socket_work(sock, reply_window, now)
        if work is not None and (work.kind == "connect" or not peers.inside(sock)):
            found.append(work)
    found += [Pending("external", label, since) for label, since in marks]
    return found


def wake_sources(loop: Any) -> list[Pending]:
    """Who else could still wake the loop once ``external_work()`` is empty.

    Threads other than the calling one, the executor workers the loop used
    (idle once it has no jobs) and, in test mode, the threads that were
    already running when the loop began its census (earlier tests' pools:
    they cannot know this loop); and watched sockets whose peer is
    outside the loop (or still being connected to).  Listeners, pipes and
    other fds are left to the caller: whether anyone can still write to
    them is not known here.
    """
    current = threading.current_thread()
    known = loop._worker_threads() | loop._older_threads()
    found = [
        Pending("thread", f"thread {thread.name!r}", None)
        for thread in threading.enumerate()
        if thread is not current and thread not in known
    ]
    watched = _watched_sockets(loop)
    peers = _Peers(loop, watched)
    for sock in watched:
        if sock.listening or sock.type != socket.SOCK_STREAM:
            continue
        connecting = sock.tcp is not None and sock.tcp.state == _TCP_SYN_SENT
        if connecting or (sock.peer is not None and not peers.inside(sock)):
            found.append(Pending("socket", _describe(sock), None))
    return found


def describe_fd(loop: Any, fd: int, fileobj: object) -> str:
    """A short name for a watched fd in reports.

    "listener 127.0.0.1:8080", "socket 127.0.0.1:51234 -> 127.0.0.1:8080",
    "unix socket /tmp/x.sock", "unix listener /tmp/x.sock", "udp socket
    0.0.0.0:5353", "pipe", "pidfd of process 1234", else "fd 7".
    """
    sock = _read_socket(fd, fileobj, False, False)
    if sock is not None:
        return _describe(sock)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return f"fd {fd}"
    if stat.S_ISFIFO(mode):
        return "pipe"
    pid = _pidfd_pid(fd)
    if pid is not None:
        return f"pidfd of process {pid}"
    return f"fd {fd}"


def _pidfd_pid(fd: int) -> int | None:
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[pidfd]":
            return None
        with open(f"/proc/self/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
