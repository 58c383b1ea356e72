# The compiled Handle and TimerHandle (see handles.py): their fields, by
# asyncio's names.  _when keeps the number it was given, as asyncio's does.

cdef class Handle:
    cdef public object _callback
    cdef public object _args
    cdef public bint _cancelled
    cdef public object _loop
    cdef public object _source_traceback
    cdef public object _repr
    cdef public object _context
    cdef object __weakref__


cdef class TimerHandle(Handle):
    cdef public bint _scheduled
    cdef public object _when
    # Compiled only: the run loop's heap order (see timerheap.earlier).
    cdef readonly double _deadline
    cdef readonly long long _seq
    # Compiled only: its place in the heap while _scheduled (timerheap.heap_remove).
    cdef readonly Py_ssize_t _heap_index


# call_soon_threadsafe's handle from 3.14 (see handles.py): no fields of its own; its lock
# is in its context object.
cdef class ThreadSafeHandle(Handle):
    pass
