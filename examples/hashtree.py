"""Hash every file under a directory with a pool of asyncio workers.

A plain asyncio program: it runs unchanged on the stdlib loop and on snakeloop.

    python3 examples/hashtree.py [DIR] [--workers N]
    python3 -m snakeloop examples/hashtree.py [DIR] [--workers N]

The directory tree is listed in a thread, its paths go through a bounded
asyncio.Queue to N worker tasks inside a TaskGroup, and each worker reads and
hashes its file in a thread (asyncio.to_thread) under a Semaphore that caps how
many files are read at once, and under a per-file asyncio.timeout. Everything
printed is deterministic for a given tree except the elapsed time, so two runs
on different loops can be compared line by line.
"""

import argparse
import asyncio
import hashlib
import os
import time
from collections import defaultdict

SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules"}
CHUNK = 1 << 16


def list_files(root):
    """Every regular file under root, skipping hidden and build directories."""
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for name in files:
            path = os.path.join(top, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return sorted(found)


def hash_file(path):
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


async def producer(root, queue, workers):
    for path in await asyncio.to_thread(list_files, root):
        await queue.put(path)
    for _ in range(workers):
        await queue.put(None)  # one stop marker per worker


async def worker(queue, reads, results, problems, per_file_timeout):
    while (path := await queue.get()) is not None:
        try:
            async with reads, asyncio.timeout(per_file_timeout):
                results[path] = await asyncio.to_thread(hash_file, path)
        except TimeoutError:
            problems[path] = "timed out"
        except OSError as exc:
            problems[path] = type(exc).__name__


def fingerprint(results, root):
    """One digest for the whole tree: sha256 over the sorted 'relpath digest' lines."""
    tree = hashlib.sha256()
    for path in sorted(results):
        tree.update(f"{os.path.relpath(path, root)} {results[path][0]}\n".encode())
    return tree.hexdigest()


async def main():
    parser = argparse.ArgumentParser(description="Hash a directory tree with asyncio workers.")
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--max-reads", type=int, default=4, help="files read at once")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per file")
    args = parser.parse_args()
    if not os.path.isdir(args.root):
        parser.error(f"not a directory: {args.root}")

    loop_class = type(asyncio.get_running_loop())
    started = time.perf_counter()
    queue = asyncio.Queue(maxsize=2 * args.workers)
    reads = asyncio.Semaphore(args.max_reads)
    results, problems = {}, {}
    async with asyncio.TaskGroup() as tg:
        tg.create_task(producer(args.root, queue, args.workers))
        for _ in range(args.workers):
            tg.create_task(worker(queue, reads, results, problems, args.timeout))
    elapsed = time.perf_counter() - started

    total = sum(size for _, size in results.values())
    by_digest = defaultdict(list)
    for path, (digest, _) in results.items():
        by_digest[digest].append(os.path.relpath(path, args.root))
    print(f"loop:        {loop_class.__module__}.{loop_class.__qualname__}")
    print(f"hashed:      {len(results)} files, {total} bytes, {args.workers} workers")
    print(f"fingerprint: {fingerprint(results, args.root)}")
    print("largest files:")
    largest = sorted(results.items(), key=lambda item: (-item[1][1], item[0]))[:5]
    for path, (digest, size) in largest:
        print(f"  {size:>10}  {digest[:16]}  {os.path.relpath(path, args.root)}")
    shared = sorted(
        (paths for paths in by_digest.values() if len(paths) > 1),
        key=lambda paths: (-len(paths), sorted(paths)),
    )
    print(f"same content: {len(shared)} groups")
    for paths in shared[:3]:
        print(f"  {len(paths)} copies: {', '.join(sorted(paths)[:4])}")
    for path in sorted(problems):
        print(f"skipped:     {os.path.relpath(path, args.root)} ({problems[path]})")
    print(f"elapsed:     {elapsed:.3f} s")


if __name__ == "__main__":
    asyncio.run(main())
