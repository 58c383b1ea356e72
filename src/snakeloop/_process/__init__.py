"""Helpers of the process side of the loop: starting children, watching their exit, fork safety.

``spawning`` starts a child from a thread of its own; ``exitwatch`` watches
one child for its exit (pidfd, or a thread per child); ``forking`` disowns a
parent's loops in a forked child.  None of them imports the loop; the loop's
mixins in ``snakeloop.subprocess`` use them.
"""
