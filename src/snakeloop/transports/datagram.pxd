# The C type of datagram.DatagramSocketTransport (compiled build: setup.py).

from .socketbase cimport SocketTransportBase
from .socketcalls cimport SOCKADDR_STORAGE_SIZE, sock_recvfrom_inet, sock_send, sock_sendto_peer

cdef Py_ssize_t UDP_READ_SIZE, _HEADER_SIZE
cdef bint _PY312, _PY313, _DROP_EMPTY, _C_CALLS

cdef class DatagramSocketTransport(SocketTransportBase):
    cdef public object _address
    cdef public bint _connected
    cdef public object _recv_view
    cdef public bint _udp
    cdef bytearray _peer
    cdef object _peer_address

    cpdef _read_ready(self)
    cpdef sendto(self, data, addr=*)
