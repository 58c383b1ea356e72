"""Helpers of the process side of the loop: child exit watching and fork safety.

``exitwatch`` watches one child for its exit (pidfd, or a thread per child);
``forking`` disowns a parent's loops in a forked child.  Neither imports the
loop; the loop's mixins in ``snakeloop.subprocess`` use them.
"""
