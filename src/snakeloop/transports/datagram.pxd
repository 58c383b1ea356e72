# The C type of datagram.DatagramSocketTransport (compiled build: setup.py).

from .socketbase cimport SocketTransportBase

cdef class DatagramSocketTransport(SocketTransportBase):
    cdef public object _address
    cdef public bint _connected
    cdef public object _recv_view
    cdef public bint _udp
