"""How the SDK talks to a console that is slow, overloaded or not a console at all: safe requests
are tried again after 502, 503, 429 (waiting the server's Retry-After) and connection errors;
a request that changes something never is; every request has a timeout; an answer without
Berth's error body says the URL may be wrong. Against a real HTTP server on this machine whose
answers each test scripts (the console itself is tested in tests/integration/test_sdk.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from berth_sdk import (
    APIConnectionError,
    APITimeoutError,
    AsyncBerthClient,
    BerthAPIError,
    BerthClient,
    ServerError,
)

from tests.processes import free_port

DEPLOYMENT = {"id": 7, "name": "qwen", "state": "DEPLOYED"}


@dataclass
class Scripted:
    """What the server answers, in order (the last answer repeats), and what it was asked."""

    answers: deque = field(default_factory=deque)
    asked: list[tuple[str, str]] = field(default_factory=list)
    asked_at: list[float] = field(default_factory=list)

    def then(self, status: int, body: object = None, delay_s: float = 0, **headers: str):
        self.answers.append((status, body, delay_s, headers))
        return self

    def next_answer(self) -> tuple:
        return self.answers.popleft() if len(self.answers) > 1 else self.answers[0]


def handler_for(script: Scripted) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            script.asked.append((self.command, self.path))
            script.asked_at.append(time.monotonic())
            status, body, delay_s, headers = script.next_answer()
            time.sleep(delay_s)
            raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            kind = "text/html" if isinstance(body, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(raw)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    return Handler


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (the timeout test) leaves a broken pipe: expected


@pytest.fixture
def script() -> Iterator[Scripted]:
    scripted = Scripted()
    server = QuietServer(("127.0.0.1", 0), handler_for(scripted))
    scripted.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield scripted
    server.shutdown()
    server.server_close()


def client_of(script: Scripted, **options: object) -> BerthClient:
    return BerthClient(base_url=script.url, api_key="berth_test", **options)  # type: ignore[attr-defined,arg-type]


def test_a_read_is_tried_again_after_503_and_502_then_answers(script):
    script.then(503, {"detail": "busy"}).then(502, {"detail": "gateway"}).then(200, DEPLOYMENT)
    with client_of(script) as client:
        assert client.serving.get_deployment(7).name == "qwen"
    assert script.asked == [("GET", "/api/v1/deployments/7")] * 3


def test_429_waits_as_long_as_retry_after_says(script):
    script.then(429, {"detail": "slow down"}, Retry_After="1").then(200, DEPLOYMENT)
    with client_of(script) as client:
        assert client.serving.get_deployment_status(7) == "DEPLOYED"
    first, second = script.asked_at
    assert second - first >= 0.95  # the server's word, not the client's short backoff


def test_a_change_is_never_sent_twice_even_when_the_answer_is_503(script):
    script.then(503, {"detail": "the console is restarting", "field": ""})
    with client_of(script) as client, pytest.raises(ServerError) as raised:
        client.serving.stop_deployment(7)
    assert script.asked == [("POST", "/api/v1/deployments/7/stop")]
    assert raised.value.status_code == 503
    assert raised.value.message == "the console is restarting"


def test_retries_end_after_max_retries_with_the_last_answer(script):
    script.then(503, {"detail": "still busy", "field": ""}, Retry_After="0")
    with client_of(script, max_retries=2) as client, pytest.raises(ServerError) as raised:
        client.serving.get_deployment(7)
    assert len(script.asked) == 3  # the first try and two more
    assert "still busy" in str(raised.value)


def test_refusals_carry_status_words_and_field_and_are_not_retried(script):
    body = {"detail": "copies: must be 0 to 1000", "field": "copies"}
    script.then(400, body)
    with client_of(script) as client, pytest.raises(BerthAPIError) as raised:
        client.serving.get_deployment(7)
    assert (raised.value.status_code, raised.value.field) == (400, "copies")
    assert raised.value.message == "copies: must be 0 to 1000"
    assert len(script.asked) == 1


def test_an_answer_without_berths_error_body_says_the_url_may_be_wrong(script):
    script.then(404, "<html><body>Not Found</body></html>")
    with client_of(script) as client, pytest.raises(BerthAPIError) as raised:
        client.serving.get_deployment(7)
    assert raised.value.status_code == 404
    assert "is the URL the console's address?" in str(raised.value)


def test_a_console_that_does_not_answer_in_time_is_a_timeout(script):
    script.then(200, DEPLOYMENT, delay_s=2)
    with client_of(script, timeout=0.3, max_retries=0) as client:
        with pytest.raises(APITimeoutError) as raised:
            client.serving.get_deployment(7)
    assert isinstance(raised.value, TimeoutError)
    assert "did not answer in time" in str(raised.value)


def test_a_console_that_is_not_there_is_tried_again_then_said():
    closed = f"http://127.0.0.1:{free_port()}"
    with BerthClient(base_url=closed, api_key="berth_test", max_retries=1) as client:
        started = time.monotonic()
        with pytest.raises(APIConnectionError) as raised:
            client.serving.get_deployment(7)
    assert f"cannot reach the console at {closed}" in str(raised.value)
    assert time.monotonic() - started >= 0.25  # one backoff (0.25 to 0.5 s) before the retry


def test_the_async_client_follows_the_same_rules(script):
    script.then(503, {"detail": "busy"}, Retry_After="0").then(200, DEPLOYMENT)

    async def read_then_stop() -> str:
        async with AsyncBerthClient(base_url=script.url, api_key="berth_test") as client:
            deployment = await client.serving.get_deployment(7)
            script.answers.clear()
            script.then(503, {"detail": "restarting", "field": ""})
            with pytest.raises(ServerError):
                await client.serving.stop_deployment(7)
            return deployment.name

    assert asyncio.run(read_then_stop()) == "qwen"
    assert script.asked == [
        ("GET", "/api/v1/deployments/7"),
        ("GET", "/api/v1/deployments/7"),
        ("POST", "/api/v1/deployments/7/stop"),
    ]
