"""Keeping 256 KiB reads on the heap, under glibc's malloc.

OS facts this module relies on:

* glibc serves an allocation above its mmap threshold with ``mmap`` and
  gives it back with ``munmap`` when it is freed.  The threshold starts at
  128 KiB.
* ``socket.recv(n)`` allocates ``n`` bytes and shrinks the object to what
  was received.  For a 256 KiB read under the starting threshold, that is
  ``mmap``, ``mremap`` and ``munmap`` on every read, and fresh pages
  for the kernel to zero.
* The threshold is dynamic: freeing an mmapped block raises it to that
  block's size (at most 32 MiB on 64-bit), and the heap's trim threshold
  to twice that.  A process that has freed one large block reads from the
  heap from then on; one that never did pays the three calls forever.
  asyncio's ``recv(256 KiB)`` never frees a block whole (each is shrunk
  first), so its own reads never raise it.
* A threshold set with ``mallopt`` or ``MALLOC_MMAP_THRESHOLD_`` is fixed,
  and other allocators (musl, jemalloc) have no such rule: there the one
  1 MiB block below costs an allocation and a free, once, and nothing else.
"""

from __future__ import annotations

__all__ = ["keep_large_reads_on_heap"]

_SETTLING_BLOCK = 1024 * 1024
_settled = False


def keep_large_reads_on_heap() -> None:
    """Free one 1 MiB block, once per process, so 256 KiB reads stay on the heap.

    A process that has been up for a while has usually done this by
    accident; the first bulk read makes sure of it.  The cost is that glibc
    keeps up to 2 MiB of freed heap instead of returning it at once.
    """
    global _settled
    if _settled:
        return
    _settled = True
    block = bytearray(_SETTLING_BLOCK)
    del block
