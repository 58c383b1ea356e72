"""Transports: the objects between a protocol and a file descriptor.

Each kind has its own module (stream sockets, datagrams, pipes, TLS); what
they share, write-buffer flow control, is in ``flowcontrol``.  Transports
use a loop through asyncio's public methods and the members of
``_core.contract.LoopContract`` (registering readers and writers, owning
their fd, the shared receive buffer), never the loop's tables or the core's
internals; ``tests/test_architecture.py`` holds them to it.
"""
