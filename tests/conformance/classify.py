"""Maintainer helper: propose exclusions.txt / network.txt lines for a module's selected tests.

    python tests/conformance/classify.py test_streams [--mode loop]

It builds the module's selection as the worker does (stdlib target), reads each selected test's
source (decorators included) and prints, for tests not yet listed:

* ``EXCLUDE`` candidates: the test reads or patches asyncio's private implementation (private
  loop/transport attributes, mock.patch of asyncio modules, base_events & co., TestLoop,
  loop methods replaced on the instance);
* ``NETWORK`` candidates: the test uses sockets, servers/connections, datagrams, pipes,
  subprocesses, signals, ssl or sendfile.

The output is a proposal to review by hand, never applied automatically: the runner itself only
reads the committed data files.  Private access hidden in helper methods is not seen.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402
import _worker  # noqa: E402

PRIVATE = [
    (r"""(?<=patch\(['"])asyncio\.[\w.]+""", "mock.patch of {}"),
    (r"""(?<=patch\.object\()asyncio\.[\w.]+""", "mock.patch of {}"),
    (r"""@patch_socket\b""", "patches asyncio.base_events.socket (patch_socket)"),
    (
        r"""patch\.object\(\s*(?:asyncio\.)?(?:base_events|selector_events|unix_events|"""
        r"""proactor_events|sslproto|base_subprocess|events|futures|tasks|coroutines)\b[\w.]*""",
        "patches {}",
    ),
    (r"""\b(?:self\.)?loop\._[A-Za-z]\w*""", "uses private {}"),
    (
        r"""\b(?:srv|server|tr|transport|transp|ssl_proto|sslobj|proto)\._[A-Za-z]\w*""",
        "uses private {}",
    ),
    (
        r"""\b(?:base_events|selector_events|unix_events|proactor_events|sslproto|"""
        r"""base_subprocess|constants)\.\w+""",
        "uses asyncio internals ({})",
    ),
    (r"""new_test_loop\(|\bTestLoop\b""", "runs on CPython's private test_utils.TestLoop"),
    (
        r"""(?:\b|_)loop\.(?!call_exception_handler\b|slow_callback_duration\b)"""
        r"""[a-z]\w*\s*=(?!=)""",
        "replaces {} on the loop instance",
    ),
    (r"""mock_nonblocking_socket|\bm_socket\b""", "drives the loop with mocked sockets"),
]

NETWORK = (
    r"""\b(?:socket|socketpair|create_connection|create_server|create_unix_\w+|"""
    r"""create_datagram_endpoint|sock_\w+|sendfile|ssl|connect_read_pipe|"""
    r"""connect_write_pipe|connect_accepted_socket|subprocess_exec|subprocess_shell|"""
    r"""create_subprocess_\w+|add_signal_handler|remove_signal_handler|getaddrinfo|"""
    r"""getnameinfo|os\.pipe|start_tls|start_server|open_connection|"""
    r"""start_unix_server|open_unix_connection)\b"""
)


def private_reasons(src: str) -> list[str]:
    found = []
    for rx, fmt in PRIVATE:
        for m in re.finditer(rx, src):
            text = fmt.format(re.sub(r"\s+", "", m.group(0)).rstrip("="))
            if text not in found:
                found.append(text)
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("modules", nargs="+")
    p.add_argument("--mode", choices=("loop", "task"), default="loop")
    p.add_argument("--all", action="store_true", help="also show tests already listed")
    args = p.parse_args(argv)

    selection = _data.load_selection()
    factory, task_cls, future_cls = _worker.resolve_target("stdlib")
    version = sys.version_info[:2]
    excl = _data.PatternList.load(_data.EXCLUSIONS_FILE, version)
    net = _data.PatternList.load(_data.NETWORK_FILE, version)
    for module in args.modules:
        if importlib.util.find_spec(_data.ID_PREFIX + module) is None:
            print(f"# {module}: not in this Python version")
            continue
        plan = _worker.plan_module(
            module, args.mode, selection, factory, task_cls, future_cls, network=True
        )
        for test in plan["tests"]:
            tid = _data.short_id(test.id())
            if not args.all and (tid in excl or tid in net):
                continue
            method = getattr(type(test), test._testMethodName)
            try:
                src = inspect.getsource(method)
            except (OSError, TypeError):
                src = ""
            reasons = private_reasons(src)
            if reasons:
                print(f"EXCLUDE {tid}  # {'; '.join(reasons)}")
                continue
            uses = sorted(set(re.findall(NETWORK, src)))
            if uses:
                print(f"NETWORK {tid}  # {', '.join(uses)[:100]}")
        for cname in plan["unclassified"]:
            print(f"UNCLASSIFIED {module}.{cname}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
