# Cython's tp_new gives every instance of a cdef class with a __dict__ slot an
# empty dict at once, and CPython (3.13 on) specializes a method call
# (fut.done(), transport.write()) only on an instance whose dict is unmade:
# a class's __cinit__ calls this to drop the dict while it is still empty;
# CPython makes it again on the first attribute set.  Declarations only: no
# module goes with this file.
cdef extern from *:
    """
    static void snakeloop_drop_empty_dict(PyObject *o) {
        Py_ssize_t offset = Py_TYPE(o)->tp_dictoffset;
        PyObject **slot;
        if (offset <= 0) {
            return;
        }
        slot = (PyObject **)((char *)o + offset);
        if (*slot != NULL && PyDict_CheckExact(*slot) && PyDict_GET_SIZE(*slot) == 0) {
            Py_CLEAR(*slot);
        }
    }
    """
    void drop_empty_dict "snakeloop_drop_empty_dict" (object o)
