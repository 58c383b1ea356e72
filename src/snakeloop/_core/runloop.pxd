# The compiled CoreLoop (see runloop.py).  snakeloop.Loop and its parts set
# most of these fields from Python, so they stay Python objects; the tables
# the run loop walks are typed.

from snakeloop._core.counters cimport LoopCounters


cdef class CoreLoop:
    cdef public object _ready
    cdef public list _scheduled
    cdef public dict _timers
    cdef public Py_ssize_t _timer_cancelled_count
    cdef public object _stopping
    cdef public bint _closed
    cdef public object _debug
    cdef public object _thread_id
    cdef public object _clock
    cdef public double _clock_resolution
    cdef public object _now
    cdef public object _io
    cdef public object _poll
    cdef public object _waker
    cdef public object _waker_fd
    cdef public object _internal_readers
    cdef public dict _readers
    cdef public dict _writers
    cdef public dict _fileobjs
    cdef public object _current_handle
    cdef public object _block_forever
    cdef public object _threadsafe_inbox
    cdef public LoopCounters _counters
    cdef public object _observe
    cdef public object _on_slow_stretch
    cdef public object slow_callback_duration
