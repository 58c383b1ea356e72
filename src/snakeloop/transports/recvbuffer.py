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

__all__ = ["RECV_BUFFER_SIZE"]

# The largest read asyncio makes (its transports' max_size).
RECV_BUFFER_SIZE = 256 * 1024
