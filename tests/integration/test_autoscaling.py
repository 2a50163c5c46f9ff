"""Autoscaling with the real processes (worker, beat, watcher, gateway) and simulated engines:
a ramp of 1 → 32 → 1 streams through the gateway adds copies after the up-window, their leaving
after the down-window drains them first (no request is lost: every one is counted), each change
is an Event with its numbers; new bounds move only the copies outside them (the others keep
their engines), and a copy short of room waits with the reason until room frees."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.core.management import call_command

from console.models import ApiKey
from deployments import actions
from deployments.choices import CopyState, DeploymentState, EventKind
from deployments.models import Copy, Deployment, Event
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, gateway_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

FAST = {
    "BERTH_AUTOSCALE_EVERY_S": "0.5",
    "BERTH_GATEWAY_REFRESH_S": "0.2",
    "BERTH_METRICS_EVERY_S": "1",
}
POLICY = {"min_copies": 1, "max_copies": 3, "target_in_flight": 1, "up_window_s": 1,
          "down_window_s": 3}  # fmt: skip
# The ramp: 1 → 32 → 1 streams for a target of 8 a copy (4 copies at the peak).
RAMP = {**POLICY, "max_copies": 4, "target_in_flight": 8}
RAMP_STEPS = (1, 2, 4, 8, 16, 32)
# About 2 s a reply: 80 tokens at the simulator's 40 tokens a second.
REQUEST = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 80,
           "ignore_eos": True, "stream": True}  # fmt: skip


class Load:
    """`streams` clients, each sending one streamed chat after the other until stopped; every
    reply is counted by how it ended."""

    def __init__(self, gateway: str, key: str, model: str = "auto") -> None:
        self.url, self.key = f"{gateway}/v1/chat/completions", key
        self.request = {**REQUEST, "model": model}
        self.endings: Counter[str] = Counter()
        self.streams = 0
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=max(RAMP_STEPS))

    def set_streams(self, streams: int) -> None:
        with self.lock:
            before, self.streams = self.streams, streams
        for number in range(before, streams):
            self.pool.submit(self.client, number)

    def client(self, number: int) -> None:
        with httpx.Client(timeout=60) as http:
            while number < self.streams:
                self.endings[self.one(http)] += 1

    def one(self, http: httpx.Client) -> str:
        headers = {"Authorization": f"Bearer {self.key}"}
        try:
            with http.stream("POST", self.url, json=self.request, headers=headers) as reply:
                body = b"".join(reply.iter_bytes())
        except httpx.HTTPError as error:
            return f"broken: {error}"
        if reply.status_code != 200:
            return f"{reply.status_code}: {body[:200]!r}"
        return "complete" if body.rstrip().endswith(b"data: [DONE]") else "cut short"

    def stop(self) -> Counter[str]:
        self.set_streams(0)
        self.pool.shutdown(wait=True)
        return self.endings


def serving(deployment: Deployment) -> list[Copy]:
    return list(
        Copy.objects.filter(deployment=deployment, state=CopyState.READY, draining_since=None)
    )


def running(deployment: Deployment) -> list[Copy]:
    return list(Copy.objects.filter(deployment=deployment).exclude(state=CopyState.STOPPED))


def test_a_ramp_to_32_streams_adds_copies_and_its_end_drains_them_losing_no_request(
    tmp_path, bob, red
):
    call_command("load_catalog")
    cluster = simulated_cluster("auto", gpus=4)
    key = ApiKey.issue(bob, "load")[1]
    with console_processes(tmp_path, **FAST), gateway_server(**FAST) as gateway:
        deployment = host(bob, red, cluster, "auto", autoscaling=RAMP,
                          engine_settings={"max_model_len": 4096})  # fmt: skip
        wait_for(reached(deployment, DeploymentState.DEPLOYED), 90, what="DEPLOYED")
        load = Load(gateway, key)
        try:
            for streams in RAMP_STEPS:
                load.set_streams(streams)
                time.sleep(1)
            wait_for(lambda: len(serving(deployment)) == 4, 90, what="four copies serving")
            for streams in reversed(RAMP_STEPS):
                load.set_streams(streams)
                time.sleep(1)
            wait_for(lambda: len(running(deployment)) == 1, 90, what="back to one copy")
        finally:
            endings = load.stop()
    assert set(endings) == {"complete"}, endings  # none dropped while copies drained
    assert endings["complete"] >= 32
    changes = list(
        Event.objects.filter(deployment=deployment, kind=EventKind.AUTOSCALE).order_by("at")
    )
    assert changes[0].message.startswith("1 → ")
    assert "for 1 copy, target 8 per copy (above it for 1 s)" in changes[0].message
    assert changes[-1].message.endswith("(below it for 3 s)")
    assert changes[-1].message.split(":")[0].endswith("→ 1 copy")


def test_new_bounds_move_only_the_copies_outside_them(tmp_path, bob, red):
    call_command("load_catalog")
    cluster = simulated_cluster("bounds", gpus=4)
    with console_processes(tmp_path, **FAST):
        policy = {**POLICY, "min_copies": 2, "down_window_s": 600}
        deployment = host(bob, red, cluster, "bounds", autoscaling=policy, copies=1,
                          engine_settings={"max_model_len": 4096})  # fmt: skip
        assert deployment.copies_wanted == 2  # the starting number, clamped to the bounds
        wait_for(lambda: len(serving(deployment)) == 2, 90, what="two copies serving")
        engines = {copy.pk: copy.process_id for copy in serving(deployment)}

        done = actions.set_autoscaling(bob, deployment, {**policy, "max_copies": 5})
        assert "copies that serve keep serving" in done.words
        time.sleep(3)  # a few autoscaler passes and reconciles
        assert {copy.pk: copy.process_id for copy in serving(deployment)} == engines

        actions.set_autoscaling(bob, deployment, {**policy, "min_copies": 3, "max_copies": 5})
        wait_for(lambda: len(serving(deployment)) == 3, 90, what="a third copy for the new floor")
        assert {c.pk: c.process_id for c in serving(deployment) if c.pk in engines} == engines

        # Room short: a fourth copy is wanted while another deployment holds the fourth GPU;
        # it waits, saying why, and starts once that deployment stops.
        blocker = host(bob, red, cluster, "blocker", engine_settings={"max_model_len": 4096})
        wait_for(reached(blocker, DeploymentState.DEPLOYED), 90, what="the blocker DEPLOYED")
        actions.set_autoscaling(bob, deployment, {**policy, "min_copies": 4, "max_copies": 5})
        wait_for(lambda: Copy.objects.filter(deployment=deployment, state=CopyState.PENDING),
                 60, what="a copy waiting for room")  # fmt: skip
        # The deployment's state follows its copies a moment later.
        wait_for(reached(deployment, DeploymentState.DEGRADED), 30, what="DEGRADED")
        waiting = Deployment.objects.get(pk=deployment.pk)
        # With the numbers of the room that is short, as Scale says them.
        assert "3 of 4 copies serve; 1 waits for room: Each copy reserves" in waiting.last_message
        assert "GiB" in waiting.last_message
        actions.stop(bob, blocker)
        wait_for(lambda: len(serving(deployment)) == 4, 90, what="the fourth copy, room freed")

        fixed = actions.scale(bob, deployment, 3)
        assert "Autoscaling is off" in fixed.words
        assert Deployment.objects.get(pk=deployment.pk).autoscaling is None
