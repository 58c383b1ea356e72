"""Transports: the objects between a protocol and a file descriptor.

Each kind has its own module (stream sockets, datagrams, pipes, TLS); what
they share, write-buffer flow control, is in ``flowcontrol``.  Transports
use only the loop's public and readiness API (``call_soon``,
``_add_reader``/``_add_writer``), never the core's internals.
"""
