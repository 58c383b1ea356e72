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

# time.monotonic without a call into Python: on Linux CPython reads
# CLOCK_MONOTONIC with clock_gettime, takes the nanoseconds as a 64-bit count
# and turns them into seconds by an integer division when they are whole, and
# otherwise by a float division by 1e9; this gives the same double for the same
# reading, so these reads and loop.time() (the Python one) are one clock.  On
# macOS time.monotonic is another clock (mach_absolute_time): C_MONOTONIC is 0
# there and the run loop calls the clock as before.
cdef extern from *:
    """
    #include <time.h>
    #if defined(__linux__) && defined(CLOCK_MONOTONIC)
    #define SNAKELOOP_C_MONOTONIC 1
    static double snakeloop_monotonic_seconds(void) {
        struct timespec ts;
        long long ns;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        if (ns % 1000000000LL == 0) {
            return (double)(ns / 1000000000LL);
        }
        return (double)ns / 1e9;
    }
    #else
    #define SNAKELOOP_C_MONOTONIC 0
    static double snakeloop_monotonic_seconds(void) { return 0.0; }
    #endif
    """
    const bint C_MONOTONIC "SNAKELOOP_C_MONOTONIC"
    double monotonic_seconds "snakeloop_monotonic_seconds" () nogil

# CLOCK_MONOTONIC_COARSE is CLOCK_MONOTONIC as the kernel last stored it, at a
# timer tick: the same timeline, never ahead of it, and behind it by about a
# tick (clock_getres gives the tick: 4 ms at HZ=250; 1.5 ticks was the most
# measured on a busy VM).  The vDSO reads it without the clocksource (no
# rdtsc): about 5 ns against 22 for CLOCK_MONOTONIC on the reference VM.  The
# run loop reads it first when a timer is pending (see _run_iterations).  Where
# the kernel has no such clock the step is 0, and the run loop never reads it.
cdef extern from *:
    """
    #if SNAKELOOP_C_MONOTONIC && defined(CLOCK_MONOTONIC_COARSE)
    static double snakeloop_coarse_seconds(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    }
    static double snakeloop_coarse_step(void) {
        struct timespec ts;
        if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0) {
            return 0.0;
        }
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    }
    #else
    static double snakeloop_coarse_seconds(void) { return 0.0; }
    static double snakeloop_coarse_step(void) { return 0.0; }
    #endif
    """
    double coarse_seconds "snakeloop_coarse_seconds" () nogil
    double coarse_step "snakeloop_coarse_step" () nogil
from snakeloop._core.handles cimport Handle, TimerHandle
from snakeloop._core.timerheap cimport (
    deadline_of,
    heap_remove,
    heappop,
    heappush,
    index_heap,
)
from snakeloop._core.epollwait cimport snakeloop_epoll_events, epoll_wait_list
from snakeloop._core.suspension cimport suspension_of
from snakeloop._core.readyqueue cimport learn_deque, queue_append, queue_popleft

# What the steps of one run share (see _Run in runloop.py).
cdef class _Run:
    cdef bint once
    cdef Py_ssize_t countdown, limit
    cdef Py_ssize_t polls, ran, ran_io, lone, nevents, backlog, fired, ready_peak
    cdef double idle
    cdef list lags
    cdef LoopCounters counters
    cdef bint timed
    cdef object now
    cdef bint c_clock
    cdef double last_read, flushed_at, slow, flush_gap
    cdef Py_ssize_t ran_mark, io_mark, lone_mark, timer_mark
    cdef object handle
    cdef bint may_skip, skip_poll
    cdef object popleft
    cdef bint coarse_ok
    cdef double coarse_margin, coarse_floor
    cdef Py_ssize_t coarse_skip, skip_run
    cdef long long skip_seq


cdef class CoreLoop:
    cdef public object _ready
    cdef public object _plain_ready
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
    cdef public object _time_replaced
    cdef public object _time_bound
    cdef public object _clock_now
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
    cdef public bint _skip_polls_after_polls
    cdef public object _threadsafe_inbox
    cdef public LoopCounters _counters
    cdef public object _observe
    cdef public object _timed
    cdef public object _on_slow_stretch
    cdef public object slow_callback_duration
    cdef public object _direct_task_class
    cdef public object _future_class
    cdef long long _timer_seq
    cdef public object _timer_ties
    cdef public dict _tie_index

    @cython.locals(scheduled=list, run=_Run)
    cpdef _run_iterations(self, once)

    @cython.locals(handle=Handle)
    cdef object _run_ready(self, Py_ssize_t ntodo, object ready)

    @cython.locals(c_clock=cython.bint, slow=double, t=double, t0=double, until=double, handle=Handle)
    cpdef Py_ssize_t _run_ready_timed(self, Py_ssize_t ntodo, object ready, tuple timed) except -1

    @cython.locals(scheduled=list, timer=TimerHandle)
    cdef _queue_due_timers(self, double end_time)

    @cython.locals(timer=TimerHandle)
    cdef TimerHandle _push_timer(self, object when, object callback, object args, object context, int hidden)

    @cython.locals(group=list, member=TimerHandle, other=TimerHandle, index=dict)
    cdef _order_tie(self, TimerHandle timer)

    @cython.locals(group=list, kept=list, index=dict)
    cdef _untie(self, TimerHandle timer)



# The steps of an iteration (runloop.py), folded into _run_iterations.
@cython.locals(run=_Run, now=object)
cdef _Run _start_run(CoreLoop loop, bint once)
@cython.locals(slow=double)
cdef inline object _read_threshold(CoreLoop loop, _Run run)
cdef inline double _read_clock(_Run run) except? -1.0
cdef inline void _mark(_Run run, double t, Py_ssize_t not_run) noexcept
cdef inline object _end_stretch(CoreLoop loop, _Run run, double t, Py_ssize_t not_run, object last)
cdef inline object _publish_counts(_Run run, Py_ssize_t iterations)
cdef inline bint _run_ends(CoreLoop loop, _Run run) except -1
cdef inline object _poll_without_waiting(CoreLoop loop, _Run run)
@cython.locals(scheduled=list, timed=cython.bint, t=double, timeout=double, waited=double)
cdef inline object _wait_for_events(CoreLoop loop, _Run run)
@cython.locals(scheduled=list, io_handle=Handle)
cdef inline bint _ran_lone_reader(CoreLoop loop, _Run run, object events) except -1
@cython.locals(readers=dict, io_handle=Handle)
cdef inline object _take_io_callbacks(CoreLoop loop, _Run run, object events)
@cython.locals(coarse=double, deadline=double, t=double, end_time=double)
cdef inline int _queue_due_timers_compiled(CoreLoop loop, _Run run, list scheduled) except -1
@cython.locals(t=double, end_time=double)
cdef inline object _queue_due_timers_interpreted(CoreLoop loop, _Run run, list scheduled)
@cython.locals(ntodo=Py_ssize_t)
cdef inline int _run_ready_callbacks(CoreLoop loop, _Run run, object ready, object batch) except -1
@cython.locals(io_handle=Handle)
cdef inline object _run_io_batch(_Run run, object ready, list batch)


@cython.locals(handle=Handle)
cdef Handle _new_handle(object callback, object args, CoreLoop loop, object context)

@cython.locals(timer=TimerHandle)
cdef TimerHandle _new_timer(object when, object callback, object args, CoreLoop loop, object context)


cdef inline _run_live_handle(Handle handle)

cdef object _MethodType, _FunctionType
cdef object _OMITTED, _C_TASK, _ASYNCIOS

cdef Py_ssize_t _STRETCH_CALLBACKS
cdef bint _C_CLOCK
cdef double _COARSE_STEP
cdef double _COARSE_TICKS_OF_MARGIN
cdef double _COARSE_TICKS_PER_SLOW
cdef Py_ssize_t _COARSE_SKIPS
cdef Py_ssize_t _COARSE_SKIPS_MAX
cdef double _COARSE_SKIP_HEADROOM

@cython.locals(timer=TimerHandle)
cdef inline double _first_deadline(list scheduled) noexcept


cdef class TimeAttribute:
    cdef object _function


cdef class EpollWait:
    cdef int _epfd
    cdef snakeloop_epoll_events _events
