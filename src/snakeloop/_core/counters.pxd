# The compiled LoopCounters (see counters.py): counts are C integers, times
# C doubles; run_started and wait_started also hold None.

cdef class LoopCounters:
    cdef public Py_ssize_t iterations
    cdef public Py_ssize_t polls
    cdef public Py_ssize_t polls_skipped
    cdef public Py_ssize_t callbacks
    cdef public Py_ssize_t ready_total
    cdef public Py_ssize_t ready_max
    cdef public Py_ssize_t io_events
    cdef public Py_ssize_t io_backlog
    cdef public double idle
    cdef public Py_ssize_t timers_fired
    cdef public double lag_max
    cdef public double lag_sum
    cdef public Py_ssize_t lag_count
    cdef public list lag_hist
    cdef public Py_ssize_t slow_iterations
    cdef public double uptime
    cdef public object run_started
    cdef public object wait_started
    cdef public double wait_ended
    cdef public bint timed
