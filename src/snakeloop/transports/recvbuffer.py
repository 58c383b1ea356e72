"""One 256 KiB receive buffer per loop, shared by every reader that copies out.

Unix datagram sockets, large ``sock_recv*`` calls and TLS transports (for
ciphertext) read into it and copy what they got into a ``bytes`` (or a TLS
BIO) before they return.  Readiness
callbacks run one at a time on a loop, so two reads never overlap, and one
buffer serves them all: asyncio gives each TLS connection its own 256 KiB,
most of what an idle connection costs.
"""

from __future__ import annotations

__all__ = ["RECV_BUFFER_SIZE", "recv_buffer"]

# The largest read asyncio makes (its transports' max_size).
RECV_BUFFER_SIZE = 256 * 1024


def recv_buffer(loop):
    """The loop's shared receive buffer, made on first use."""
    view = getattr(loop, "_shared_recv_view", None)
    if view is None:
        view = memoryview(bytearray(RECV_BUFFER_SIZE))
        try:
            loop._shared_recv_view = view
        except AttributeError:
            pass  # a loop that takes no attributes: a buffer per caller
    return view
