"""Readiness bits shared by every backend and the loop.

They are the values Linux gives ``POLLIN``/``EPOLLIN`` (1) and
``POLLOUT``/``EPOLLOUT`` (4), so the epoll and poll backends hand their
event lists to the loop untouched.  Any other bit in a reported mask
(``*ERR``, ``*HUP``, ``POLLNVAL``) is an error condition: the loop wakes
both the reader and the writer of that fd, and each sees the error from its
own syscall.
"""

READABLE = 1
WRITABLE = 4
