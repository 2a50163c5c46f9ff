"""The Ray actor that is one copy: it starts the engine as its child (the argv and environment
Berth rendered; never a shell), on the node's loopback, and relays to it on the node's address,
checking the engine key on every path (vLLM's own key guards only /v1). It exits when its
engine exits, so that Ray's restart count applies.

Shipped to the nodes by value (the driver registers this module with Ray's cloudpickle): it
imports nothing of Berth's, only the standard library, aiohttp (Ray's own dependency) and Ray.
The engine's lines go to the actor's output, which Ray keeps per worker (its log API).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import aiohttp
from aiohttp import web

LOOPBACK = "127.0.0.1"
# Request headers not passed on to the engine (hop-by-hop, or the client's key).
NOT_RELAYED = {"host", "authorization", "connection", "content-length", "transfer-encoding"}


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def with_listening(argv: list[str], port: int) -> list[str]:
    """The engine's argv listening on the loopback at `port` (whatever the console rendered)."""
    out, skip = [], False
    for index, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port") and index + 1 < len(argv):
            skip = True
            continue
        out.append(arg)
    return [*out, "--host", LOOPBACK, "--port", str(port)]


def die_with_parent() -> None:
    """In the engine's process before it runs: it gets SIGTERM when the actor's process dies
    (killed by Ray, say), so that no engine outlives its copy."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class EngineCopy:
    """One copy on a Ray node: the engine, its relay and what the driver asks of them."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        engine_key: str,
        secret_env: dict[str, str],
    ) -> None:
        import ray

        self.started_at = time.time()  # for the sweep of actors no copy owns
        self.key = engine_key
        self.engine_port = free_port(LOOPBACK)
        self.relay_port = free_port("0.0.0.0")
        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        self.node_ip = ray.util.get_node_ip_address()
        self.gpu_ids = [str(gpu) for gpu in ray.get_gpu_ids()]
        child_env = {**os.environ, **env, **secret_env}
        if self.gpu_ids:
            child_env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        self.engine = subprocess.Popen(
            with_listening(argv, self.engine_port),
            env=child_env,
            cwd=cwd or None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        self.stopping = False
        threading.Thread(target=self._echo_and_exit, daemon=True).start()
        threading.Thread(target=self._relay, daemon=True).start()

    def _echo_and_exit(self) -> None:
        """The engine's lines to the actor's output (Ray's log API reads them); when it exits,
        the actor exits too, with the engine's code, so that Ray restarts it or calls it dead."""
        assert self.engine.stdout is not None
        for raw in self.engine.stdout:
            sys.stdout.write(raw.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        code = self.engine.wait()
        print(f"berth: the engine exited with code {code}", flush=True)
        if self.stopping:
            return  # asked to stop: the driver ends the actor, without a restart
        time.sleep(0.5)  # the last lines reach Ray's log first
        os._exit(code if code > 0 else 1)

    def _relay(self) -> None:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(self._serve_relay())
        loop.run_forever()

    async def _serve_relay(self) -> None:
        self.client = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{path:.*}", self._relayed)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", self.relay_port).start()

    def _allowed(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        return bool(self.key) and hmac.compare_digest(given, f"Bearer {self.key}")

    async def _relayed(self, request: web.Request) -> web.StreamResponse:
        if not self._allowed(request):
            return web.json_response({"error": "a valid engine key is required"}, status=401)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in NOT_RELAYED}
        headers["Authorization"] = f"Bearer {self.key}"
        url = f"http://{LOOPBACK}:{self.engine_port}{request.rel_url}"
        body = await request.read()
        async with self.client.request(
            request.method, url, data=body or None, headers=headers
        ) as upstream:
            reply = web.StreamResponse(status=upstream.status)
            for name in ("Content-Type", "Cache-Control"):
                if name in upstream.headers:
                    reply.headers[name] = upstream.headers[name]
            await reply.prepare(request)
            async for chunk in upstream.content.iter_any():
                await reply.write(chunk)
            await reply.write_eof()
            return reply

    def status(self) -> dict[str, Any]:
        """Where the copy listens, which GPUs Ray gave it, and whether its engine is healthy."""
        return {
            "node_id": self.node_id,
            "node_ip": self.node_ip,
            "gpu_ids": self.gpu_ids,
            "relay_port": self.relay_port,
            "pid": self.engine.pid,
            "healthy": self._healthy(),
            "started_at": self.started_at,
        }

    def _healthy(self) -> bool:
        import urllib.request

        request = urllib.request.Request(
            f"http://{LOOPBACK}:{self.engine_port}/health",
            headers={"Authorization": f"Bearer {self.key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        """End the engine (SIGTERM, then SIGKILL); the driver then ends the actor."""
        self.stopping = True
        if self.engine.poll() is None:
            self.engine.terminate()
            try:
                self.engine.wait(20)
            except subprocess.TimeoutExpired:
                self.engine.kill()
