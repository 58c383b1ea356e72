# The C type of stream.SocketTransport (compiled build: setup.py).

from .socketbase cimport SocketTransportBase

cdef class SocketTransport(SocketTransportBase):
    cdef public object _buffered_protocol
    cdef public bint _bulk_reads
    cdef public object _chunk_size
    cdef public object _empty_waiter
    cdef public bint _eof
    cdef public bint _eof_received
    cdef public bint _send_at_once
    cdef public object _server
