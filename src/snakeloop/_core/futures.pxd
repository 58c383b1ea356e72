cimport cython
from cpython.contextvars cimport PyContext_CopyCurrent
# The compiled Future and Task (see futures.py): their fields, by asyncio's
# names.  __dict__ takes attributes that user code sets, as asyncio's C
# Future allows, and __weakref__ lets asyncio keep its tasks in a WeakSet.

cdef class Future:
    cdef public object _loop
    cdef public object _callback0
    cdef public object _context0
    cdef public object _more_callbacks
    cdef public object _state
    cdef public object _result
    cdef public object _exception
    cdef public object _exception_tb
    cdef public object _cancel_message
    cdef public object _cancelled_exc
    cdef public bint _asyncio_future_blocking
    cdef public bint _log_traceback_flag
    cdef public object _source_traceback
    cdef dict __dict__
    cdef object __weakref__


from snakeloop._core.emptydict cimport drop_empty_dict
from snakeloop._core.runloop cimport CoreLoop


@cython.locals(core=CoreLoop)
cdef inline object _plain_ready_attr(object loop, object name, object default)

from snakeloop._core.readyqueue cimport learn_deque, queue_append

cdef inline _append_plain(object ready, object entry)


# The compiled Task._step sends into a native coroutine with PyIter_Send
# (3.10+), which tells a return from a yield by its status: no StopIteration
# is made, raised, caught and traced for every task that finishes (about 3000
# instructions a task), and no bound method is made for every step.
cdef extern from *:
    """
    static PyObject *snakeloop_coro_send(PyObject *coro, int *returned) {
        PyObject *result = NULL;
        PySendResult status = PyIter_Send(coro, Py_None, &result);
        if (status == PYGEN_ERROR) {
            return NULL;
        }
        *returned = status == PYGEN_RETURN;
        return result;
    }
    """
    object coro_send "snakeloop_coro_send" (object coro, bint *returned)
    bint is_native_coroutine "PyCoro_CheckExact" (object o)

# Future.__delattr__ hands a name that is not a field on to the generic rule
# (the instance dict, a subclass's descriptors): object.__delattr__ refuses a
# type whose tp_setattro is Cython's own.
cdef extern from *:
    """
    static int snakeloop_generic_delattr(PyObject *o, PyObject *name) {
        return PyObject_GenericSetAttr(o, name, NULL);
    }
    """
    int generic_delattr "snakeloop_generic_delattr" (object o, object name) except -1

cdef class Task(Future):
    cdef public object _log_destroy_pending
    cdef public object _name
    cdef public object _num_cancels_requested
    cdef public bint _must_cancel
    cdef public object _fut_waiter
    cdef public object _coro
    cdef public object _context

    @cython.locals(returned=bint)
    cdef _step_now(self, object exc=*)


# The two outcomes of a step that follow the send, in C inline in Task._step_now.
cdef inline _task_returned(Task task, object loop, object result)
@cython.locals(fut=Future)
cdef inline _task_awaits_own(Task task, object loop, object result)


# Module constants the hot methods read, as C globals: looked up by name, each
# read cost a dict lookup (about 200 instructions on 3.13), and a task switch
# reads several.  Nothing outside this module reads them.
cdef object _PENDING, _CANCELLED, _FINISHED
cdef object _CancelledError, _InvalidStateError
cdef object _register_task, _enter_task, _leave_task
cdef object _OWN_CLASSES, _TASK_STEP
cdef bint _SEND_NATIVE
cdef unsigned long long _tasks_named

cdef inline object _copy_context()

cdef inline object _task_name_counter()
cdef bint _PY312, _PY313, _PY315
cdef object _Context

cdef object _refuse_second_init(object fut)
