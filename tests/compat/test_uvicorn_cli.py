"""``uvicorn --loop snakeloop:new_event_loop``: the command line the README names.

uvicorn 0.36 and later take a loop factory as an import path.  The server runs in a
child process on an ephemeral loopback port; an ASGI app reports the loop it runs on, a
request reads it, and SIGINT shuts the server down as a user's Ctrl-C would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request

APP = textwrap.dedent(
    """
    import asyncio


    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        loop = asyncio.get_running_loop()
        body = f"{type(loop).__module__}.{type(loop).__qualname__}".encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
    """
)

_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def test_uvicorn_serves_on_snakeloop_from_the_command_line(tmp_path):
    (tmp_path / "loopapp.py").write_text(APP)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--loop",
            "snakeloop:new_event_loop",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "loopapp:app",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    log: list[str] = []
    try:
        assert server.stderr is not None
        for line in server.stderr:
            log.append(line)
            if match := _RUNNING.search(line):
                port = int(match.group(1))
                break
        else:
            raise AssertionError("uvicorn ended before it served:\n" + "".join(log))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            assert response.read().decode() == "snakeloop.loop.Loop"
        server.send_signal(signal.SIGINT)
        _, rest = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=30)
    assert server.returncode == 0, "".join(log) + rest
    assert "Finished server process" in rest
