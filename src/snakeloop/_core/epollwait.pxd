# epoll_wait(2) for the compiled run loop (runloop.EpollWait), in C.  Declarations only:
# runloop.pxd cimports it.
#
# It does what select.epoll.poll(timeout) does, result and exceptions alike, without the
# 12 KiB malloc and free of its event array on every call (FD_SETSIZE - 1 events, the
# default maxevents, which glibc serves from its bins when a 1 KiB echo's buffers sit
# between two polls) and without Py_BuildValue per event.  The array is the caller's,
# one per loop: the wait runs without the GIL, so two loops in two threads must not share
# one.
#
# OS and CPython facts it relies on (CPython's Modules/selectmodule.c, 3.11 to 3.15):
# * timeout None blocks (-1 ms).  A number of seconds becomes nanoseconds rounded away
#   from zero, then milliseconds rounded up, so a poll never returns before its timeout; a
#   negative one blocks, as -1 does; beyond int64 ns is OverflowError("timestamp out of
#   range for platform time_t", and from 3.14 "... for C PyTime_t"), beyond INT_MAX ms
#   OverflowError("timeout is too large");
#   anything else is TypeError("timeout must be an integer or None"; from 3.15 "timeout
#   must be a real number or None, not TYPE", TYPE the fully qualified name, %T), as
#   _PyTime_FromSecondsObject words it for a non-number.
# * EINTR: the signal handlers run (an exception from one propagates), and the wait is
#   retried with what is left of the timeout, or returns [] once none is (PEP 475).  Any
#   other failure is OSError(errno).
# * The result is a list of (fd, events) tuples, fd an int and events an unsigned int.
# * A closed epoll object raises ValueError("I/O operation on closed epoll object").

cdef extern from *:
    """
    #include <sys/epoll.h>
    #include <time.h>
    #include <errno.h>
    #include <limits.h>
    #include <math.h>

    #define SNAKELOOP_MAXEVENTS 1023  /* FD_SETSIZE - 1: epoll.poll's default */
    typedef struct {
        struct epoll_event events[SNAKELOOP_MAXEVENTS];
    } snakeloop_epoll_events;

    /* Seconds -> milliseconds as epoll.poll rounds them; 0 with an exception on error. */
    static int snakeloop_timeout_ms(PyObject *timeout, double *seconds, int *ms) {
        double s, ns;
        if (PyFloat_CheckExact(timeout)) {
            s = PyFloat_AS_DOUBLE(timeout);
        } else if (PyLong_Check(timeout) || PyFloat_Check(timeout)) {
            s = PyFloat_AsDouble(timeout);
            if (s == -1.0 && PyErr_Occurred()) {
                return 0;
            }
        } else {
#if PY_VERSION_HEX >= 0x030F0000
            PyErr_Format(PyExc_TypeError, "timeout must be a real number or None, not %T",
                         timeout);
#else
            PyErr_SetString(PyExc_TypeError, "timeout must be an integer or None");
#endif
            return 0;
        }
        if (isnan(s)) {
            PyErr_SetString(PyExc_ValueError, "Invalid value NaN (not a number)");
            return 0;
        }
        ns = s * 1e9;
        ns = ns >= 0 ? ceil(ns) : floor(ns);
        if (!(ns >= -9223372036854775808.0 && ns < 9223372036854775808.0)) {
#if PY_VERSION_HEX >= 0x030E0000
            PyErr_SetString(PyExc_OverflowError, "timestamp out of range for C PyTime_t");
#else
            PyErr_SetString(PyExc_OverflowError, "timestamp out of range for platform time_t");
#endif
            return 0;
        }
        if (ns / 1e6 > (double)INT_MAX || ns / 1e6 < (double)INT_MIN) {
            PyErr_SetString(PyExc_OverflowError, "timeout is too large");
            return 0;
        }
        *seconds = s;
        *ms = ns < 0 ? -1 : (int)ceil(ns / 1e6);
        return 1;
    }

    static PyObject *snakeloop_epoll_wait(int epfd, snakeloop_epoll_events *buf,
                                          PyObject *timeout) {
        int ms = -1, nfds, i;
        double seconds = -1.0, deadline = 0.0;
        struct timespec now;
        PyObject *result;
        if (epfd < 0) {
            PyErr_SetString(PyExc_ValueError, "I/O operation on closed epoll object");
            return NULL;
        }
        if (timeout != Py_None) {
            if (!snakeloop_timeout_ms(timeout, &seconds, &ms)) {
                return NULL;
            }
            if (seconds >= 0) {
                clock_gettime(CLOCK_MONOTONIC, &now);
                deadline = (double)now.tv_sec + now.tv_nsec * 1e-9 + seconds;
            }
        }
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            errno = 0;
            nfds = epoll_wait(epfd, buf->events, SNAKELOOP_MAXEVENTS, ms);
            Py_END_ALLOW_THREADS
            if (nfds >= 0 || errno != EINTR) {
                break;
            }
            if (PyErr_CheckSignals() < 0) {
                return NULL;
            }
            if (seconds >= 0) {
                double left;
                clock_gettime(CLOCK_MONOTONIC, &now);
                left = deadline - ((double)now.tv_sec + now.tv_nsec * 1e-9);
                if (left < 0) {
                    nfds = 0;
                    break;
                }
                ms = (int)ceil(ceil(left * 1e9) / 1e6);
            }
        }
        if (nfds < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return NULL;
        }
        result = PyList_New(nfds);
        if (result == NULL) {
            return NULL;
        }
        for (i = 0; i < nfds; i++) {
            PyObject *fd = PyLong_FromLong(buf->events[i].data.fd);
            PyObject *mask = PyLong_FromUnsignedLong(buf->events[i].events);
            PyObject *pair = PyTuple_New(2);
            if (fd == NULL || mask == NULL || pair == NULL) {
                Py_XDECREF(fd);
                Py_XDECREF(mask);
                Py_XDECREF(pair);
                Py_DECREF(result);
                return NULL;
            }
            PyTuple_SET_ITEM(pair, 0, fd);
            PyTuple_SET_ITEM(pair, 1, mask);
            PyList_SET_ITEM(result, i, pair);
        }
        return result;
    }
    """
    ctypedef struct snakeloop_epoll_events:
        pass
    object epoll_wait_list "snakeloop_epoll_wait" (int epfd, snakeloop_epoll_events *buf, object timeout)
