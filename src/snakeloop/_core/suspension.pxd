# Frame inspection for the timed ready loop (see suspension.py); runloop.pxd cimports
# suspension_of, so the loop calls it in C.

cimport cython


cdef inline bint _in_library(object filename, dict library_files, object judge) except -1

@cython.locals(chain=list, depth=Py_ssize_t)
cpdef list suspension_of(object task, dict library_files, object judge, bint before_step=*)

cdef object _CoroutineType, _GeneratorType
cdef Py_ssize_t _MAX_SUSPENSION_DEPTH
cdef bint _TELLS_SUSPENDED
