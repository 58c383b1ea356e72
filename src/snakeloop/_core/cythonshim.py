"""What ``import cython`` gives the hot modules when Cython is not installed.

The modules of ``_core`` are compiled by Cython from this same source (see
setup.py).  Cython reads their literal ``import cython`` statement at compile
time, and a compiled module never imports anything for it.  Run as plain
Python they import the real ``cython`` package if it happens to be installed
(its pure-Python mode has ``compiled = False``), and this module otherwise, so
the pure build needs nothing beyond the standard library.  Only the names the
modules use are here.
"""

compiled = False
