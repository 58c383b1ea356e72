# The compiled CoreLoop (see runloop.py).  snakeloop.Loop and its parts set
# most of these fields from Python, so they stay Python objects; the tables
# the run loop walks are typed.

cimport cython
from cpython.contextvars cimport (
    PyContext_CheckExact,
    PyContext_CopyCurrent,
    PyContext_Enter,
    PyContext_Exit,
)

from snakeloop._core.counters cimport LoopCounters
from snakeloop._core.handles cimport Handle, TimerHandle


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

    @cython.locals(compiled=cython.bint)
    cpdef _run_iterations(self, once)

    @cython.locals(handle=Handle)
    cdef Py_ssize_t _run_ready(self, Py_ssize_t ntodo) except -1

    @cython.locals(scheduled=list, timers=dict, timer=TimerHandle)
    cdef _queue_due_timers(self, object when, double end_time)

    @cython.locals(timers=dict, kept=list, live=list, timer=TimerHandle)
    cdef list _compact_timers(self)


@cython.locals(handle=Handle)
cdef Handle _new_handle(object callback, object args, CoreLoop loop, object context)

@cython.locals(timer=TimerHandle)
cdef TimerHandle _new_timer(object when, object callback, object args, CoreLoop loop, object context)
