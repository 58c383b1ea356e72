# The C type of stream.SocketTransport (compiled build: setup.py).

cimport cython

from .socketbase cimport SocketTransportBase
from .socketcalls cimport sock_recv, sock_send

cdef Py_ssize_t READ_SIZE, BULK_READ_SIZE, BULK_READ_MIN, _IOV_MAX
cdef bint _PY312, _PY313, _HAS_SENDMSG, _C_CALLS

cdef class SocketTransport(SocketTransportBase):
    cdef public object _buffered_protocol
    cdef public bint _bulk_reads
    cdef public object _chunk_size
    cdef public object _empty_waiter
    cdef public bint _eof
    cdef public bint _eof_received
    cdef public bint _send_at_once
    cdef public object _server

    @cython.locals(data=bytes)
    cpdef _read_data(self)
    @cython.locals(data=bytes)
    cdef bytes _recv_bulk(self)
    @cython.locals(n=Py_ssize_t)
    cpdef write(self, data)
