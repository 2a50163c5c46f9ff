"""Benchmark: an engine's log line to a connected browser's WebSocket, through the real watcher,
database, Redis channel layer and daphne; and the browser's time to filter a 20,000-line log.

`make bench` runs the full sizes (1, 20 and 200 viewers, 2,000 lines); `make test` a smoke size.
Baseline, measured in the same run: one message through the Redis channel layer and back.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
import websocket
from django.conf import settings
from django.core.management import call_command

from deployments.choices import DeploymentState
from deployments.models import Copy, Deployment
from tests import factories
from tests.integration.test_lifecycle import host, simulated_cluster
from tests.processes import console_processes, wait_for
from tests.processes import console_server as start_console_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.bench]
FULL = os.environ.get("BERTH_BENCH_FULL") == "1"
VIEWERS = [1, 20, 200] if FULL else [1]
LINES = 2000 if FULL else 50


@pytest.fixture(autouse=True)
def fast_password_hashing():
    """The console server runs in its own process with the real hasher: keep it here too."""


def layer_round_trip() -> float:
    """Baseline: group_send to one channel and receive it, on the real Redis layer."""
    from channels_redis.core import RedisChannelLayer

    async def once() -> float:
        layer = RedisChannelLayer(**settings.CHANNEL_LAYERS["default"]["CONFIG"])
        channel = await layer.new_channel()
        await layer.group_add("bench", channel)
        times = []
        for _ in range(50):
            began = time.perf_counter()
            await layer.group_send("bench", {"type": "x"})
            await layer.receive(channel)
            times.append(time.perf_counter() - began)
        await layer.flush()
        return statistics.median(times)

    return asyncio.run(once())


def session_cookie(url: str, username: str, password: str) -> str:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{url}/login/")
    token = next(c.value for c in jar if c.name == "csrftoken")
    body = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    )
    opener.open(
        urllib.request.Request(f"{url}/login/", body.encode(), headers={"Referer": f"{url}/login/"})
    )
    return "; ".join(f"{c.name}={c.value}" for c in jar)


class Viewer(threading.Thread):
    """A browser's socket on the logs page: records when each marked line arrives."""

    def __init__(self, url: str, cookie: str, origin: str) -> None:
        super().__init__(daemon=True)
        self.socket = websocket.create_connection(url, cookie=cookie, origin=origin, timeout=30)
        self.arrivals: dict[int, float] = {}

    def run(self) -> None:
        try:
            while True:
                message = self.socket.recv()
                now = time.time()
                for part in message.split("bench-mark ")[1:]:
                    self.arrivals.setdefault(int(part.split(" ")[0]), now)
        except Exception:  # closed at the end of the benchmark
            return


def engine_log(tmp_path: Path, copy: Copy) -> Path:
    return (
        tmp_path / f"cluster-{copy.deployment.cluster_id}" / "copies" / str(copy.pk) / "engine.log"
    )


def print_lines(path: Path, first: int, count: int, pause: float) -> dict[int, float]:
    """Append vLLM-shaped lines as the engine would; returns when each was written."""
    written = {}
    with path.open("a") as log:
        for n in range(first, first + count):
            stamp = time.strftime("%m-%d %H:%M:%S")
            log.write(f"INFO {stamp} [bench.py:1] bench-mark {n} end\n")
            log.flush()
            written[n] = time.time()
            if pause:
                time.sleep(pause)
    return written


@pytest.fixture
def console_server(transactional_db):
    # One user watches from every socket here: let it open all of them.
    with start_console_server(BERTH_SOCKETS_PER_USER=str(max(VIEWERS) + 10)) as url:
        yield url


def test_line_latency_and_rate(console_server, tmp_path, capsys):
    from console.models import Role

    bob = factories.make_user("bob")
    team = factories.make_team("red")
    factories.add_member(bob, team, Role.OPERATOR)
    call_command("load_catalog")
    baseline = layer_round_trip()
    results = []
    with console_processes(tmp_path, BERTH_LOG_FOLLOW_EVERY_S="0.05"):
        deployment = host(
            bob, team, simulated_cluster("bench"), "logged", engine_settings={"max_model_len": 4096}
        )
        wait_for(
            lambda: Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED, 90
        )
        path = engine_log(tmp_path, Copy.objects.get(deployment=deployment))
        cookie = session_cookie(console_server, "bob", factories.PASSWORD)
        ws_base = (
            console_server.replace("http", "ws") + f"/ws/live/deployment-{deployment.pk}-logs/"
        )
        first = 0
        for count in VIEWERS:
            seq = Deployment.objects.get(pk=deployment.pk).log_seq  # only lines from now on
            viewers = [
                Viewer(f"{ws_base}?after={seq}", cookie, console_server) for _ in range(count)
            ]
            for viewer in viewers:
                viewer.start()
            # Every viewer connected and caught up (one line each has) before the clock runs:
            # the figures are for viewers that watch, not for sockets that are still opening.
            print_lines(path, first, 1, 0)
            wait_for(
                lambda first=first, viewers=viewers: all(first in v.arrivals for v in viewers),
                60,
                what="every viewer connected",
            )
            first += 1
            written = print_lines(path, first, 20, 0.05)  # paced: latency
            began = time.time()
            written.update(print_lines(path, first + 20, LINES, 0))  # a burst: sustained rate
            last = first + 20 + LINES - 1
            wait_for(
                lambda last=last, viewers=viewers: all(last in v.arrivals for v in viewers),
                120,
                what="every line at every viewer",
            )
            rate = LINES / (max(v.arrivals[last] for v in viewers) - began)
            latencies = sorted(
                v.arrivals[n] - written[n] for v in viewers for n in range(first, first + 20)
            )
            results.append(
                (
                    count,
                    statistics.median(latencies),
                    latencies[int(len(latencies) * 0.99) - 1],
                    rate,
                )
            )
            for viewer in viewers:
                viewer.socket.close()
            first = last + 1
    with capsys.disabled():
        print(
            f"\nLog line → WebSocket (baseline: one Redis layer round trip {baseline * 1000:.2f} ms)"
        )
        for count, p50, p99, rate in results:
            print(
                f"  {count:>2} viewer(s): p50 {p50 * 1000:6.1f} ms ({p50 / baseline:5.0f} × baseline), "
                f"p99 {p99 * 1000:6.1f} ms (target < 150 ms), {rate:7.0f} lines/s sustained (target >= 3,000)"
            )
    assert all(p50 > 0 for _, p50, _, _ in results)


def test_browser_time_to_filter_a_20000_line_log(console_server, capsys):
    from playwright.sync_api import expect, sync_playwright

    from console.models import Role
    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
    from tests.e2e.test_live_pages import many_lines

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    bob = factories.make_user("bob")
    team = factories.make_team("red")
    factories.add_member(bob, team, Role.OPERATOR)
    deployment = factories.make_deployment("long-log", team)
    many_lines(deployment, 20_000)
    timings = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{console_server}/login/")
        page.fill("#id_username", "bob")
        page.fill("#id_password", factories.PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{console_server}/")
        began = time.perf_counter()
        page.goto(f"{console_server}/deployments/{deployment.pk}/logs/")
        page.locator("#log-lines tr").first.wait_for()
        opened = time.perf_counter() - began
        for level, rows in [("ERROR", 40), ("", 200), ("ERROR", 40), ("", 200)]:
            began = time.perf_counter()
            page.select_option("select[name=level]", level)
            expect(page.locator("#log-lines tr")).to_have_count(
                rows, timeout=30_000
            )  # no eval: CSP
            timings.append(time.perf_counter() - began)
        browser.close()
    with capsys.disabled():
        print(
            f"\nA 20,000-line log in Chromium: page opens with its newest lines in {opened * 1000:.0f} ms; "
            f"a filter change shows its lines in {statistics.median(timings) * 1000:.0f} ms (median of 4)"
        )
    assert len(timings) == 4
