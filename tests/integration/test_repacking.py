"""Re-packing with the real processes (worker, beat, watcher, gateway) and simulated engines: a
cluster fragmented by four deployments takes a whole-GPU copy after two make-before-break moves
(the moved deployments never serve fewer copies, a load through the gateway loses no request,
and the room held always equals the copies that run); a move whose new copy cannot start is
rolled back with nothing lost, and the deployment that waited says why."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from console.models import ApiKey
from deployments import actions
from deployments.choices import (
    COPY_MAY_HAVE_ENGINE,
    CopyState,
    DeploymentState,
    EventKind,
    MoveState,
)
from deployments.models import Copy, CopyMove, Deployment, Event, Reservation
from tests.integration.test_autoscaling import Load
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, gateway_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

FAST = {"BERTH_GATEWAY_REFRESH_S": "0.2"}
SMALL = {"accelerators_per_copy": "0.25", "engine_settings": {"max_model_len": 4096}}
HALF = {"accelerators_per_copy": "0.5", "engine_settings": {"max_model_len": 4096}}
WHOLE = {"accelerators_per_copy": "1", "engine_settings": {"max_model_len": 4096}}


def serving(name: str) -> int:
    return Copy.objects.filter(deployment__name=name, state=CopyState.READY,
                               draining_since=None).count()  # fmt: skip


def gpus_of(name: str) -> list[int]:
    copies = Copy.objects.filter(deployment__name=name, state=CopyState.READY)
    return sorted(Reservation.objects.filter(copy__in=copies).values_list(
        "accelerator__index", flat=True))  # fmt: skip


def again(move: CopyMove) -> str:
    return timezone.localtime(move.updated_at + timedelta(minutes=10)).strftime("%H:%M")


def deployed(deployment: Deployment):
    return reached(deployment, DeploymentState.DEPLOYED)


class Watch(threading.Thread):
    """Looks at the rows every 0.1 s, each look one snapshot: the moved deployments' serving
    copies, and whether the room held is the room of the copies that run."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.names, self.fewest, self.mismatches = names, {name: 99 for name in names}, []
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while not self.done.is_set():
                self.look()
                time.sleep(0.1)
        finally:
            connection.close()

    def look(self) -> None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for name in self.names:
                self.fewest[name] = min(self.fewest[name], serving(name))
            holding = set(Reservation.objects.values_list("copy_id", flat=True))
            running = set(Copy.objects.filter(state__in=COPY_MAY_HAVE_ENGINE)
                          .values_list("pk", flat=True))  # fmt: skip
            if holding != running:
                self.mismatches.append((sorted(holding), sorted(running)))


def fragment(bob, red, cluster) -> list[Deployment]:
    """GPU 0: a and b (a quarter each); GPU 1: c and d. A half-GPU filler that made a and b
    share GPU 0 with it, then left, is how the pieces came about."""
    four = []
    for name in ("a", "b"):
        four.append(host(bob, red, cluster, name, **SMALL))
    filler = host(bob, red, cluster, "filler", **HALF)
    wait_for(deployed(filler), 90, what="the filler DEPLOYED")
    for name in ("c", "d"):
        four.append(host(bob, red, cluster, name, **SMALL))
    for deployment in four:
        wait_for(deployed(deployment), 90, what=f"{deployment.name} DEPLOYED")
    actions.stop(bob, filler)
    wait_for(reached(filler, DeploymentState.STOPPED), 60, what="the filler stopped")
    assert [gpus_of(name) for name in "abcd"] == [[0], [0], [1], [1]]
    return four


def halves(bob, red, cluster) -> None:
    """GPU 0: a, GPU 1: b, half of each; a filler that shared GPU 0 with a has left."""
    a = host(bob, red, cluster, "a", **HALF)
    filler = host(bob, red, cluster, "filler", **HALF)
    wait_for(deployed(filler), 90, what="the filler DEPLOYED")
    b = host(bob, red, cluster, "b", **HALF)
    for deployment in (a, b):
        wait_for(deployed(deployment), 90, what=f"{deployment.name} DEPLOYED")
    actions.stop(bob, filler)
    wait_for(reached(filler, DeploymentState.STOPPED), 60, what="the filler stopped")


def test_a_whole_gpu_is_made_by_two_moves_with_no_request_lost(tmp_path, bob, red):
    call_command("load_catalog")
    cluster = simulated_cluster("frag", gpus=2)
    key = ApiKey.issue(bob, "load")[1]
    with console_processes(tmp_path, **FAST), gateway_server(**FAST) as gateway:
        fragment(bob, red, cluster)
        loads = [Load(gateway, key, model=name) for name in "abcd"]
        for load in loads:
            load.set_streams(1)
        watch = Watch(list("abcd"))
        watch.start()
        try:
            big = host(bob, red, cluster, "big", allow_moves=True, **WHOLE)
            wait_for(deployed(big), 120, what="big DEPLOYED after the moves")
            wait_for(lambda: not CopyMove.objects.exclude(state=MoveState.DONE).exists()
                     and Copy.objects.filter(state=CopyState.STOPPING).count() == 0, 60,
                     what="the moves done")  # fmt: skip
        finally:
            watch.done.set()
            watch.join()
            endings = [load.stop() for load in loads]
    for ending in endings:
        assert set(ending) == {"complete"}, ending  # not one request failed during the moves
    assert watch.fewest == {name: 1 for name in "abcd"}  # each always served with one copy
    assert watch.mismatches == []
    moves = list(CopyMove.objects.order_by("position"))
    assert [m.state for m in moves] == [MoveState.DONE, MoveState.DONE]
    moved = [m.deployment.name for m in moves]
    assert len(set(moved)) == 2
    big_gpu = gpus_of("big")
    assert all(gpus_of(name) != big_gpu for name in "abcd")  # the four share the other GPU
    asked = Event.objects.filter(deployment__name="big", kind=EventKind.MOVE).first()
    assert asked.message.startswith("Making room: moving 2 copies: ")
    told = Event.objects.filter(deployment__name=moved[0], kind=EventKind.MOVE).order_by("id")
    words = [event.message for event in told]
    assert words[0].endswith("to make room for a deployment of team red; it keeps serving: "
                             "the new copy starts before the old one stops.")  # fmt: skip
    assert any(" drains and stops." in w for w in words)
    assert words[-1].startswith(f"Copy {moves[0].old_copy.ordinal} moved from frag-1 GPU ")


def test_a_move_whose_new_copy_cannot_start_is_rolled_back_and_the_old_copy_keeps_serving(
    tmp_path, bob, red
):
    call_command("load_catalog")
    cluster = simulated_cluster("oops", gpus=2)
    cluster.repack_policy = "on_request"  # moves without being asked
    cluster.save()
    with console_processes(tmp_path, **FAST):
        halves(bob, red, cluster)
        inventory = cluster.simulated_inventory
        inventory["engine_env"]["BERTH_SIM_OOM_AT_LOAD"] = "1"  # every new engine fails now
        cluster.simulated_inventory = inventory
        cluster.save()

        big = host(bob, red, cluster, "big", **WHOLE)
        wait_for(lambda: CopyMove.objects.filter(state=MoveState.ROLLED_BACK).exists(), 90,
                 what="the move rolled back")  # fmt: skip
        move = CopyMove.objects.get()
        wait_for(lambda: Copy.objects.get(pk=move.new_copy_id).state == CopyState.STOPPED, 30,
                 what="the new copy stopped")  # fmt: skip
        wait_for(lambda: "Moving other copies to make room failed" in
                 Copy.objects.get(deployment=big).pending_reason, 30,
                 what="big saying why it waits")  # fmt: skip
    old = Copy.objects.get(pk=move.old_copy_id)
    assert old.state == CopyState.READY and old.draining_since is None
    assert not Reservation.objects.filter(copy_id=move.new_copy_id).exists()
    assert move.message.startswith("the new copy did not start (OOM: ")
    waiting = Copy.objects.get(deployment=big)
    assert waiting.state == CopyState.PENDING
    assert waiting.pending_reason.startswith("Each copy reserves 79.65 GiB on one accelerator")
    assert " Moving other copies to make room failed: the new copy did not start (OOM: " in (
        waiting.pending_reason
    )
    assert waiting.pending_reason.endswith(f"Moves are tried again after {again(move)}.")
    assert Deployment.objects.get(pk=big.pk).state == DeploymentState.ERROR  # waits, not failed
    told = Event.objects.filter(deployment=move.deployment, kind=EventKind.MOVE).order_by("id")
    assert f"keeps serving at {move.from_words}." in told.last().message
    said = Event.objects.filter(deployment=big, kind=EventKind.MOVE).order_by("id").last()
    assert said.message.startswith("Making room failed: the new copy did not start (OOM: ")


def test_a_console_killed_in_the_middle_of_a_move_goes_on_from_the_rows(tmp_path, bob, red):
    call_command("load_catalog")
    cluster = simulated_cluster("again", gpus=2)
    with console_processes(tmp_path, **FAST) as processes:
        halves(bob, red, cluster)

        big = host(bob, red, cluster, "big", allow_moves=True, **WHOLE)
        # Killed once the new copy's engine runs. (Killed in the middle of the launch itself,
        # the launch is lost: after the watcher's grace the new copy fails, and the move is
        # rolled back as for any new copy that does not start.)
        under_way = [MoveState.STARTING, MoveState.SWITCHING]
        wait_for(lambda: CopyMove.objects.filter(state__in=under_way,
                 new_copy__process_id__isnull=False).exists(), 60,
                 what="the move under way, its new engine started")  # fmt: skip
        for name in list(processes.running):  # the whole console dies at once
            processes.kill(name)
        for name in ("worker", "transfers", "beat", "watcher"):
            processes.start(name)
        wait_for(deployed(big), 120, what="big DEPLOYED after the restart")
        move = CopyMove.objects.get()
        wait_for(lambda: CopyMove.objects.get().state == MoveState.DONE, 60, what="the move done")
    old, new = Copy.objects.get(pk=move.old_copy_id), Copy.objects.get(pk=move.new_copy_id)
    assert (old.state, new.state) == (CopyState.STOPPED, CopyState.READY)
    assert new.attempts == 1  # started once, not again after the restart
    assert not Reservation.objects.filter(copy=old).exists()
    assert serving(move.deployment.name) == 1


def test_a_cluster_that_consolidates_frees_a_whole_gpu_by_itself(tmp_path, bob, red):
    call_command("load_catalog")
    cluster = simulated_cluster("tidy", gpus=2)
    cluster.repack_policy, cluster.consolidate_above_percent = "consolidate", 30
    cluster.save()
    three_quarters = {**SMALL, "accelerators_per_copy": "0.75"}
    with console_processes(tmp_path, **FAST):
        a = host(bob, red, cluster, "a", **SMALL)
        filler = host(bob, red, cluster, "filler", **three_quarters)
        wait_for(deployed(filler), 90, what="the filler DEPLOYED")
        b = host(bob, red, cluster, "b", **SMALL)
        for deployment in (a, b):
            wait_for(deployed(deployment), 90, what=f"{deployment.name} DEPLOYED")
        assert CopyMove.objects.count() == 0  # nothing to gather while the filler stays
        actions.stop(bob, filler)  # a alone on GPU 0, b alone on GPU 1: all in pieces
        wait_for(lambda: gpus_of("a") == gpus_of("b") and
                 not Copy.objects.filter(state=CopyState.STOPPING).exists(), 90,
                 what="a and b on one GPU")  # fmt: skip
        wait_for(lambda: CopyMove.objects.filter(state=MoveState.DONE).exists(), 30,
                 what="the move done")  # fmt: skip
    move = CopyMove.objects.get()
    assert move.for_deployment is None and move.state == MoveState.DONE
    assert serving("a") == serving("b") == 1
    held = set(Reservation.objects.values_list("accelerator__index", flat=True))
    assert len(held) == 1  # the other GPU is whole and free
    told = Event.objects.filter(deployment=move.deployment, kind=EventKind.MOVE).first()
    assert "to free a whole GPU (the cluster consolidates its copies)" in told.message
