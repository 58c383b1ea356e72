"""One 256 KiB receive buffer per loop, shared by every reader that copies out.

Unix datagram sockets, large ``sock_recv*`` calls and TLS transports (for
ciphertext) read into it and copy what they got into a ``bytes`` (or a TLS
BIO) before they return.  Readiness callbacks run one at a time on a loop,
so two reads never overlap, and one buffer serves them all: asyncio gives
each TLS connection its own 256 KiB, most of what an idle connection costs.

The loop makes the buffer on first use and hands it out through the
contract (``loop._shared_recv_buffer()``); a transport may keep it from
construction on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["RECV_BUFFER_SIZE", "recv_buffer"]

# The largest read asyncio makes (its transports' max_size).
RECV_BUFFER_SIZE = 256 * 1024


def recv_buffer(loop: LoopContract) -> memoryview:
    """``loop._shared_recv_buffer()``.

    Kept for transports/tls.py, which another issue-10 branch rewrites;
    remove it once that module asks the loop itself.
    """
    return loop._shared_recv_buffer()
