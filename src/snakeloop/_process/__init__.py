"""Helpers of the process side of the loop: starting children, watching their exit, fork safety.

``spawning`` starts a child from a thread of its own; ``exitwatch`` watches
one child for its exit (pidfd, or a thread per child) and keeps a loop's
watches; ``forking`` has each loop alive at a ``fork()`` disown itself in
the child.  None of them imports the loop: ``snakeloop.subprocess`` (the
loop's ``Children``) and ``transports.subprocess`` use them, and
``forking`` calls the loop's ``_disown_after_fork()``.
"""
