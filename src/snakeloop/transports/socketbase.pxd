# The C type of socketbase.SocketTransportBase (compiled build: setup.py).

from snakeloop._core.emptydict cimport drop_empty_dict

cdef class SocketTransportBase:
    cdef dict __dict__
    cdef object __weakref__
    cdef public object _buffer
    cdef public Py_ssize_t _buffer_size
    cdef public bint _closing
    cdef public Py_ssize_t _conn_lost
    cdef public object _context
    cdef public bint _direct_calls
    cdef public dict _extra
    cdef public object _high_water
    cdef public object _loop
    cdef public object _low_water
    cdef public bint _paused
    cdef public object _protocol
    cdef public bint _protocol_connected
    cdef public bint _protocol_paused
    cdef public object _sock
    cdef public int _sock_fd
