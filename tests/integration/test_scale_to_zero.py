"""Scale to zero and wake on a request, with the real processes (worker, beat, watcher,
gateway) and simulated engines: no request for the idle time sends a deployment to IDLE (not
STOPPED), it stays on offer, the next request starts a copy and is answered by it; a request
that cannot be answered within its reply wait gets a 503 with Retry-After and words, as does
one past the number the gateway holds; a stop drains the reply in flight, and a stopped
deployment never wakes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.core.management import call_command

from console.models import ApiKey
from deployments import actions, load
from deployments.choices import CopyState, DeploymentState, EventKind
from deployments.models import Copy, Deployment, Event
from deployments.tasks import AUTOSCALE_PASS
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, gateway_server, wait_for, wait_for_a_pass_begun_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

FAST = {
    "BERTH_AUTOSCALE_EVERY_S": "0.5",
    "BERTH_GATEWAY_REFRESH_S": "0.2",
    "BERTH_RECONCILE_EVERY_S": "1",
}
IDLE_AFTER_A_MINUTE = {"min_copies": 0, "max_copies": 2, "target_in_flight": 1,
                       "up_window_s": 1, "down_window_s": 3, "idle_minutes": 1}  # fmt: skip
SETTINGS = {"max_model_len": 4096}
SLOW_START_S = 14  # the slow cluster's engines take this long to load


def chat(gateway: str, key: str, model: str, **body: object) -> httpx.Response:
    request = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{gateway}/v1/chat/completions"
    return httpx.post(url, json={**request, **body}, headers=headers, timeout=120)


def running(deployment: Deployment) -> list[Copy]:
    return list(Copy.objects.filter(deployment=deployment).exclude(state=CopyState.STOPPED))


def idle_for_two_minutes(deployment: Deployment) -> None:
    """As if its last request came two minutes ago (the idle time is a minute)."""
    load.note_request(deployment.pk, time.time() - 120)
    wait_for(reached(deployment, DeploymentState.IDLE), 60, what=f"{deployment.name} IDLE")
    wait_for(lambda: not running(deployment), 60, what=f"{deployment.name}'s copy stopped")


def autoscale_events(deployment: Deployment) -> list[str]:
    rows = Event.objects.filter(deployment=deployment, kind=EventKind.AUTOSCALE).order_by("at")
    return list(rows.values_list("message", flat=True))


def test_idle_goes_to_zero_a_request_wakes_it_and_one_that_cannot_wait_is_told_when(
    tmp_path, bob, red
):
    call_command("load_catalog")
    quick = simulated_cluster("quick", gpus=1)
    slow = simulated_cluster("slow", gpus=1, BERTH_SIM_INIT_S=str(SLOW_START_S))
    key = ApiKey.issue(bob, "wake")[1]
    with (
        console_processes(tmp_path, **FAST),
        gateway_server(**FAST, BERTH_GATEWAY_WAKE_HOLD="1") as gateway,
    ):
        sleepy = host(bob, red, quick, "sleepy", autoscaling=IDLE_AFTER_A_MINUTE,
                      engine_settings=SETTINGS)  # fmt: skip
        sluggish = host(bob, red, slow, "sluggish", autoscaling=IDLE_AFTER_A_MINUTE,
                        engine_settings=SETTINGS, reply_wait_s=10)  # fmt: skip
        for deployment in (sleepy, sluggish):
            wait_for(reached(deployment, DeploymentState.DEPLOYED), 90, what="DEPLOYED")

        # No request for the idle time: zero copies, IDLE (not STOPPED), still on offer.
        idle_for_two_minutes(sleepy)
        assert autoscale_events(sleepy)[-1] == (
            "1 → 0 copies: no request for 1 min; idle until the next request wakes it"
        )
        assert (
            "Idle: scaled to zero after 1 min" in Deployment.objects.get(pk=sleepy.pk).last_message
        )
        listed = httpx.get(f"{gateway}/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert "sleepy" in [model["id"] for model in listed.json()["data"]]

        # The next request starts a copy and is answered by it.
        woken = chat(gateway, key, "sleepy")
        assert woken.status_code == 200, woken.text
        assert woken.json()["choices"][0]["message"]["content"]
        assert "0 → 1 copy: woken by a request from bob" in autoscale_events(sleepy)
        wait_for(lambda: Deployment.objects.get(pk=sleepy.pk).last_cold_start_s, 30,
                 what="the cold start recorded")  # fmt: skip
        assert any(e.startswith("Woke from idle: a copy serves") for e in autoscale_events(sleepy))

        # A copy that cannot serve within the reply wait (10 s; it loads for 14): a 503 that
        # says when to come back; a second request past the gateway's hold (1) at once.
        idle_for_two_minutes(sluggish)
        with ThreadPoolExecutor(max_workers=2) as pool:
            held = pool.submit(chat, gateway, key, "sluggish")
            # The first request woke it, so it is held: the gateway counts it before it wakes.
            wait_for(lambda: "0 → 1 copy: woken by a request from bob" in autoscale_events(sluggish),
                     10, every=0.05, what="the first request holding")  # fmt: skip
            refused = chat(gateway, key, "sluggish")
            too_long = held.result()
        assert refused.status_code == 503, refused.text
        assert "1 requests already wait for it" in refused.json()["error"]["message"]
        assert too_long.status_code == 503, too_long.text
        words = too_long.json()["error"]["message"]
        assert words.startswith("sluggish is starting after being idle; try again in about ")
        retry_after = int(too_long.headers["retry-after"])
        assert 1 <= retry_after <= 60  # a first wake: a minute's guess, less the 10 s waited
        assert f"about {retry_after} s" in words
        answered = wait_for(lambda: ok(chat(gateway, key, "sluggish")), 60, every=1,
                            what="sluggish serving after its wake")  # fmt: skip
        assert answered
        cold_start = Deployment.objects.get(pk=sluggish.pk).last_cold_start_s
        assert cold_start is not None and cold_start >= SLOW_START_S

        # A stop drains: the reply in flight completes; stopped, a request wakes nothing.
        streamed: list[bytes] = []
        reply_done = threading.Thread(
            target=lambda: streamed.append(long_stream(gateway, key, "sleepy"))
        )
        reply_done.start()
        (copy,) = running(sleepy)
        wait_for(lambda: load.in_flight_by_copy().get(copy.pk), 10, every=0.05,
                 what="the reply in flight")  # fmt: skip
        actions.stop(bob, Deployment.objects.get(pk=sleepy.pk))
        reply_done.join(timeout=60)
        assert streamed and streamed[0].rstrip().endswith(b"data: [DONE]"), streamed
        wait_for(reached(sleepy, DeploymentState.STOPPED), 60, what="STOPPED")
        events_before = autoscale_events(sleepy)
        after_stop = chat(gateway, key, "sleepy")
        assert after_stop.status_code == 503
        assert "sleepy is stopped" in after_stop.json()["error"]["message"]
        # An autoscaler pass begun after that request has run, and left it stopped.
        wait_for_a_pass_begun_now(AUTOSCALE_PASS, 30, what="an autoscaler pass")
        assert Deployment.objects.get(pk=sleepy.pk).state == DeploymentState.STOPPED
        assert (running(sleepy), autoscale_events(sleepy)) == ([], events_before)


def ok(reply: httpx.Response) -> bool:
    return reply.status_code == 200


def long_stream(gateway: str, key: str, model: str) -> bytes:
    """A reply of about 4 s (160 tokens at the simulator's 40 a second), streamed."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 160,
            "ignore_eos": True, "stream": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=body, headers=headers,
                      timeout=60) as reply:  # fmt: skip
        return b"".join(reply.iter_bytes())
