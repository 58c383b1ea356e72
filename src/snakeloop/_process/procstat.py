"""Whether a child has exited, without reaping it, where ``waitid`` is missing (PyPy).

Linux facts this module relies on:

* ``/proc/PID/stat`` is one line: the pid, the command name in parentheses (which may
  itself hold spaces and parentheses, so the last ``)`` ends it), then the state, one
  letter.  ``Z`` is a zombie: a process that exited and that its parent has not reaped.
* A zombie keeps its pid until it is reaped, so the entry cannot name another process
  while the child is unreaped; once it is reaped the entry is gone (or, later, names a
  process that reused the pid, which only the caller's own record of the reaping can
  tell apart).
"""

from __future__ import annotations

__all__ = ["is_zombie"]


def is_zombie(pid: int) -> bool:
    """True if ``pid`` has exited and is not reaped yet; False if it runs, is gone, or
    there is no ``/proc`` to tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].startswith(b"Z")
