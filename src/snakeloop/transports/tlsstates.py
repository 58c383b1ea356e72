"""The states of a TLS connection, shared by the machine and its two faces.

``TLSMachine`` (``tlsmachine``) moves between them, ``SSLProtocol`` (``tls``)
on the transport below's events; ``SSLTransport`` (``ssltransport``) reads
them to answer ``is_closing()``.
"""

from __future__ import annotations

__all__ = [
    "_APP_EOF",
    "_APP_INIT",
    "_APP_LOST",
    "_APP_MADE",
    "_FLUSHING",
    "_HANDSHAKE",
    "_NEXT_STATE",
    "_SHUTDOWN",
    "_STATE_NAMES",
    "_UNWRAPPED",
    "_WRAPPED",
]

# Connection states.  The only moves are the ones ``_set_state`` allows:
# UNWRAPPED -> HANDSHAKE -> WRAPPED -> FLUSHING -> SHUTDOWN, and back to
# UNWRAPPED from anywhere (failure, abort, connection lost).
_UNWRAPPED = 0
_HANDSHAKE = 1
_WRAPPED = 2
_FLUSHING = 3
_SHUTDOWN = 4
_STATE_NAMES = ("UNWRAPPED", "DO_HANDSHAKE", "WRAPPED", "FLUSHING", "SHUTDOWN")
_NEXT_STATE = {
    _UNWRAPPED: _HANDSHAKE,
    _HANDSHAKE: _WRAPPED,
    _WRAPPED: _FLUSHING,
    _FLUSHING: _SHUTDOWN,
}

# What the application protocol has been told so far.  It gets
# connection_made at most once, eof_received at most once after it, and
# connection_lost exactly once after connection_made, never before.
_APP_INIT = 0
_APP_MADE = 1
_APP_EOF = 2
_APP_LOST = 3
