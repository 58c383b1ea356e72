"""The socket file of a Unix server: made at ``create_unix_server``, removed at close.

These functions touch the filesystem, which can block on a slow or remote
one: ``create_unix_server`` calls ``bind_path`` and ``inode_of``, and
``create_datagram_endpoint`` calls ``remove_stale_socket``, in the loop's
worker thread (``offload``).  ``Server.close()`` is synchronous and
must have removed the file when it returns, as asyncio's does, so
``remove_if_same_inode`` runs in the loop thread there.

OS facts this module relies on:

* ``bind()`` of an ``AF_UNIX`` socket to a path creates a socket file
  there, and fails with ``EADDRINUSE`` when anything exists at the path; a
  file left by a server that is gone has to be removed first.  Only socket
  files are removed that way, never other kinds of file.
* Closing the socket leaves its file behind.
* Another server can remove the file and bind the same path; its file has
  another inode, which is how a closing server tells its own file from a
  newcomer's.
* Abstract names (a leading NUL) have no file.
"""

from __future__ import annotations

import os
import socket
import stat
from typing import TypeAlias

# A Unix socket address: a path, or an abstract name (a leading NUL byte);
# getsockname() of an unbound socket answers "" (or b"").
UnixAddress: TypeAlias = str | bytes

__all__ = [
    "BindOutcome",
    "bind_path",
    "has_file",
    "inode_of",
    "remove_if_same_inode",
    "remove_stale_socket",
]


def has_file(path: UnixAddress) -> bool:
    """Whether a bound Unix address names a file (not abstract, not unbound)."""
    return bool(path) and path[0] not in (0, "\x00")


class BindOutcome:
    """What ``bind_path`` met, for the loop thread to log and raise in order."""

    __slots__ = ("stale_error", "bind_error", "inode", "inode_error")

    def __init__(self) -> None:
        self.stale_error: OSError | None = None  # checking or removing an old file failed
        self.bind_error: BaseException | None = None
        self.inode: int | None = None
        self.inode_error: OSError | None = None


def bind_path(sock: socket.socket, path: UnixAddress, want_inode: bool) -> BindOutcome:
    """Remove a stale socket file at ``path``, bind ``sock`` there, read the new inode."""
    outcome = BindOutcome()
    if path[0] not in (0, "\x00"):  # an empty path raises IndexError, as in asyncio
        outcome.stale_error = remove_stale_socket(path)
    try:
        sock.bind(path)
    except BaseException as exc:  # noqa: BLE001 - handed to the loop thread
        outcome.bind_error = exc
        return outcome
    if want_inode:
        try:
            outcome.inode = inode_of(sock.getsockname())
        except OSError as exc:
            outcome.inode_error = exc
    return outcome


def remove_stale_socket(path: UnixAddress) -> OSError | None:
    """Remove the socket file at ``path``, if there is one; return what prevented it."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        # The directory may allow creating the socket and nothing else.
        return err
    return None


def inode_of(path: UnixAddress) -> int | None:
    """The inode of the file a Unix socket is bound to; None if it is gone."""
    if not has_file(path):
        return None
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def remove_if_same_inode(path: UnixAddress, inode: int) -> OSError | None:
    """Remove the file at ``path`` if it is still the one with ``inode``."""
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        return err
    return None
