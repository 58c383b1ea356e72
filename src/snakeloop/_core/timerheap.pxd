# The compiled timer heap (see timerheap.py): its functions take and hold
# TimerHandles, and runloop.pxd cimports them.

cimport cython

from snakeloop._core.handles cimport TimerHandle


@cython.locals(deadline=double)
cdef double deadline_of(object when) except? -1.0

@cython.locals(x=double, y=double)
cdef inline bint earlier(TimerHandle a, TimerHandle b) except -1

cdef heappush(list heap, TimerHandle item)

@cython.locals(parent_pos=Py_ssize_t, parent=TimerHandle)
cdef _sift_up(list heap, Py_ssize_t pos, TimerHandle item)

@cython.locals(child=Py_ssize_t, right=Py_ssize_t, smaller=TimerHandle, other=TimerHandle)
cdef _sift_down(list heap, Py_ssize_t pos, Py_ssize_t n, TimerHandle item)

@cython.locals(n=Py_ssize_t, first=TimerHandle, last=TimerHandle)
cdef TimerHandle heappop(list heap)

@cython.locals(n=Py_ssize_t, pos=Py_ssize_t, timer=TimerHandle)
cdef index_heap(list heap)

@cython.locals(n=Py_ssize_t, pos=Py_ssize_t)
cdef heapify(list heap)

@cython.locals(pos=Py_ssize_t, last=TimerHandle)
cdef heap_remove(list heap, TimerHandle timer)
