# Appending to the loop's ready deque and taking from it, from the compiled core, in C.
# Declarations only: runloop.pxd and futures.pxd cimport it.
#
# ``queue.append(entry)`` on an object Cython cannot type is a method call by name:
# a type lookup of "append", then a vectorcall, about 150 instructions (callgrind,
# 3.11) for deque_append's 40, paid by every call_soon, task step and woken task.
# ``queue_append`` calls the C function behind ``collections.deque.append`` when
# the queue is exactly a deque, and the method by name otherwise (a subclass,
# such as snakeloop.instruments.InstrumentedReady, may override append).
# ``queue_popleft`` does the same for ``popleft``, which the run loop called as a
# bound method: about 60 instructions of call around deque_popleft's 22.
#
# CPython facts it relies on (3.11 to 3.13):
# * ``collections.deque.append`` is a method descriptor (PyMethodDescr_Type) whose
#   PyMethodDef is METH_O: its ml_meth takes (deque, item) and returns a new
#   reference to None, or NULL with an exception set.  ``popleft`` is one too, METH_NOARGS:
#   its ml_meth takes (deque, NULL) and returns the entry (a new reference), or NULL
#   with IndexError set on an empty deque.  learn_deque checks all of this and, if
#   it ever changes, leaves every call to the methods by name.
# * A type object outlives every instance of it, and collections.deque lives as long
#   as the interpreter: the pointers kept here are borrowed.

cdef extern from *:
    """
    static PyTypeObject *snakeloop_deque_type = NULL;
    static PyCFunction snakeloop_deque_append = NULL;
    static PyCFunction snakeloop_deque_popleft = NULL;

    /* The C function of cls.name if it is a method descriptor with these flags. */
    static int snakeloop_method_of(PyObject *cls, const char *name, int flags,
                                   PyCFunction *found) {
        PyObject *descr = PyObject_GetAttrString(cls, name);
        *found = NULL;
        if (descr == NULL) {
            return -1;
        }
        if (Py_IS_TYPE(descr, &PyMethodDescr_Type)
                && ((PyMethodDescrObject *)descr)->d_method->ml_flags == flags) {
            *found = ((PyMethodDescrObject *)descr)->d_method->ml_meth;
        }
        Py_DECREF(descr);
        return 0;
    }

    static int snakeloop_learn_deque(PyObject *cls) {
        PyCFunction append, popleft;
        if (!PyType_Check(cls)) {
            PyErr_SetString(PyExc_TypeError, "learn_deque() needs collections.deque");
            return -1;
        }
        if (snakeloop_method_of(cls, "append", METH_O, &append) < 0
                || snakeloop_method_of(cls, "popleft", METH_NOARGS, &popleft) < 0) {
            return -1;
        }
        if (append != NULL && popleft != NULL) {
            snakeloop_deque_append = append;
            snakeloop_deque_popleft = popleft;
            snakeloop_deque_type = (PyTypeObject *)cls;
        }
        return 0;
    }

    static PyObject *snakeloop_queue_popleft(PyObject *queue) {
        if (Py_TYPE(queue) == snakeloop_deque_type) {
            return snakeloop_deque_popleft(queue, NULL);
        }
        return PyObject_CallMethod(queue, "popleft", NULL);
    }

    static int snakeloop_queue_append(PyObject *queue, PyObject *entry) {
        PyObject *result;
        if (Py_TYPE(queue) == snakeloop_deque_type) {
            result = snakeloop_deque_append(queue, entry);
        } else {
            result = PyObject_CallMethod(queue, "append", "O", entry);
        }
        if (result == NULL) {
            return -1;
        }
        Py_DECREF(result);
        return 0;
    }
    """
    int learn_deque "snakeloop_learn_deque" (object cls) except -1
    int queue_append "snakeloop_queue_append" (object queue, object entry) except -1
    object queue_popleft "snakeloop_queue_popleft" (object queue)
