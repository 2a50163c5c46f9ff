"""Live updates over Channels with the real Redis layer: who may listen, what each user gets,
and log lines delivered once and in order after a reconnect."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction

from console import live
from console.routing import websocket_urls
from deployments.choices import DeploymentState, LogStream
from deployments.logs import write_lines
from deployments.transitions import move_deployment
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
CSRF_SECRET = "a" * 32


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    """Each test runs on an event loop of its own; a layer kept from an earlier test keeps
    locks of that loop (a receive cut off there leaves one held), so each test gets its own,
    as each process of the console has one."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def connect(user, group: str, query: str = "") -> WebsocketCommunicator:
    from channels.routing import URLRouter

    path = f"/ws/live/{group}/" + (f"?{query}" if query else "")
    communicator = WebsocketCommunicator(URLRouter(websocket_urls), path)
    communicator.scope["user"] = user
    communicator.scope["cookies"] = {"csrftoken": CSRF_SECRET}
    if query:
        communicator.scope["query_string"] = query.encode()
    return communicator


async def joined(communicator: WebsocketCommunicator) -> str:
    """Connect; a deployment's socket first gets the page's live parts as they are now."""
    assert (await communicator.connect())[0]
    return await communicator.receive_from(5)


async def refused(user, group: str) -> bool:
    communicator = connect(user, group)
    connected, code = await communicator.connect()
    await communicator.disconnect()
    return not connected and code == 4403


async def test_anonymous_users_and_outsiders_are_refused(red):
    from django.contrib.auth.models import AnonymousUser

    deployment = await sync_to_async(factories.make_deployment)("live-one", red)
    dave = await sync_to_async(factories.make_user)("dave")
    assert await refused(AnonymousUser(), "deployments")
    assert await refused(dave, f"deployment-{deployment.pk}")
    assert await refused(dave, f"deployment-{deployment.pk}-logs")


async def test_a_state_change_sends_one_update_after_commit_and_none_on_rollback(bob, red):
    deployment = await sync_to_async(factories.make_deployment)("live-two", red)
    listening = connect(bob, f"deployment-{deployment.pk}")
    assert 'id="deployment-health"' in await joined(listening)

    def roll_back() -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            move_deployment(deployment.pk, DeploymentState.DEPLOYING, message="placed")
            raise RuntimeError("later step failed")

    await sync_to_async(roll_back)()
    assert await listening.receive_nothing(timeout=0.5)
    await sync_to_async(move_deployment)(deployment.pk, DeploymentState.DEPLOYING, message="placed")
    html = await listening.receive_from(timeout=5)
    assert 'id="deployment-health"' in html and 'data-state="DEPLOYING"' in html
    assert await listening.receive_nothing(timeout=0.5)
    await listening.disconnect()


async def test_a_viewer_gets_no_stop_button_where_an_operator_does(bob, carol, red):
    deployment = await sync_to_async(factories.make_deployment)("live-three", red)
    operator, viewer = (
        connect(bob, f"deployment-{deployment.pk}"),
        connect(carol, f"deployment-{deployment.pk}"),
    )
    await joined(operator), await joined(viewer)
    await sync_to_async(move_deployment)(deployment.pk, DeploymentState.DEPLOYING, message="placed")
    for_operator, for_viewer = await operator.receive_from(5), await viewer.receive_from(5)
    assert ">Stop…</a>" in for_operator and 'name="csrfmiddlewaretoken"' in for_operator
    assert ">Stop…</a>" not in for_viewer and "csrfmiddlewaretoken" not in for_viewer
    await operator.disconnect()
    await viewer.disconnect()


def add_lines(deployment, texts: list[str]) -> int:
    from django.utils import timezone

    return write_lines(
        deployment.pk, [(None, LogStream.ENGINE, "INFO", timezone.now(), t) for t in texts]
    )


async def test_a_reconnect_after_seq_gets_the_missing_lines_exactly_once(bob, red):
    deployment = await sync_to_async(factories.make_deployment)("live-four", red)
    await sync_to_async(add_lines)(deployment, ["one", "two"])
    first = connect(bob, f"deployment-{deployment.pk}-logs", "after=0")
    assert (await first.connect())[0]
    html = await first.receive_from(5)
    assert "one" in html and "two" in html
    await first.disconnect()

    await sync_to_async(add_lines)(deployment, ["three", "four"])  # while disconnected
    again = connect(bob, f"deployment-{deployment.pk}-logs", "after=2")
    assert (await again.connect())[0]
    caught_up = await again.receive_from(5)
    assert "three" in caught_up and "four" in caught_up and "two" not in caught_up
    await sync_to_async(add_lines)(deployment, ["five"])
    live = await again.receive_from(5)
    assert "five" in live and "four" not in live
    assert await again.receive_nothing(timeout=0.5)
    await again.disconnect()


async def test_a_line_that_commits_late_is_not_skipped(bob, red):
    """Seqs are taken under the deployment's row lock, so a later batch waits for an earlier
    one to commit: reading after the last seq sent can never skip the late one."""
    import threading

    deployment = await sync_to_async(factories.make_deployment)("live-five", red)
    listening = connect(bob, f"deployment-{deployment.pk}-logs", "after=0")
    assert (await listening.connect())[0]
    holding, release = threading.Event(), threading.Event()

    def slow_batch() -> None:
        with transaction.atomic():
            add_lines(deployment, ["late"])
            holding.set()
            release.wait(5)

    slow = threading.Thread(target=slow_batch)
    slow.start()
    await sync_to_async(holding.wait)(5)
    quick = threading.Thread(target=add_lines, args=(deployment, ["quick"]))
    quick.start()  # blocks on the row lock until the slow batch commits
    release.set()
    await sync_to_async(slow.join)(5)
    await sync_to_async(quick.join)(5)
    received = ""
    while "quick" not in received:
        received += await listening.receive_from(5)
    assert received.index("late") < received.index("quick")
    assert received.count("late") == 1 and received.count("quick") == 1
    await listening.disconnect()


def downloading_row(repo_id: str):
    from catalog.models import ServerModel

    model = factories.make_model(repo_id)
    return ServerModel.objects.create(
        variant=model.variants.first(), state="downloading", size_bytes=4 * 2**30
    )


def save_progress(row_id: int, done: int) -> None:
    """What a download's progress save does: the bytes, then the pages are told on commit."""
    from catalog.downloads import files_changed
    from catalog.models import ServerModel

    with transaction.atomic():
        ServerModel.objects.filter(pk=row_id).update(progress_bytes=done, bytes_per_s=2**24)
        files_changed(row_id)


async def test_download_progress_is_pushed_to_on_this_server_and_the_model_page(alice, carol):
    row = await sync_to_async(downloading_row)("acme/pushed")
    model_id = await sync_to_async(lambda: row.variant.model_id)()
    on_this_server, model_page = connect(carol, "models"), connect(carol, f"model-{model_id}")
    as_admin = connect(alice, "models")
    for socket in (on_this_server, model_page, as_admin):
        assert (await socket.connect())[0]
    await sync_to_async(save_progress)(row.pk, 2**30)
    row_html = await on_this_server.receive_from(5)
    assert (
        row_html.startswith(f'<tr id="server-model-{row.pk}"') and 'hx-swap-oob="true"' in row_html
    )
    assert "25% · 1.00 GiB of 4.00 GiB · 16.0 MiB/s" in row_html
    assert "Delete files" not in row_html  # a viewer's row has no buttons
    cell = await model_page.receive_from(5)
    assert cell.startswith(f'<td id="variant-files-{row.variant_id}"') and "25%" in cell
    for_admin = await as_admin.receive_from(5)
    assert "25%" in for_admin
    for socket in (on_this_server, model_page, as_admin):
        await socket.disconnect()


async def test_model_groups_need_a_login():
    from django.contrib.auth.models import AnonymousUser

    assert await refused(AnonymousUser(), "models")
    assert await refused(AnonymousUser(), "model-1")


def files_arrived(deployment_id: int) -> None:
    """What a Sync task does when the backend has copied the files to the machine."""
    from catalog.models import ServerModel
    from clusters.backends.base import FilesResult
    from deployments import machine_files
    from deployments.models import Deployment

    deployment = Deployment.objects.get(pk=deployment_id)
    kept = ServerModel.objects.create(variant=deployment.variant, state="ready", size_bytes=10)
    row = machine_files.row_for(deployment.cluster.machines.get(), kept)
    machine_files.finish(row, FilesResult(True, message="copied 1.0 GiB to lab-m1 in 0.1 s"))


async def test_files_reaching_a_machine_update_the_panel_for_each_user(bob, carol, red):
    deployment = await sync_to_async(factories.make_deployment)("live-files", red)
    operator, viewer = (
        connect(bob, f"deployment-{deployment.pk}"),
        connect(carol, f"deployment-{deployment.pk}"),
    )
    await joined(operator), await joined(viewer)
    await sync_to_async(files_arrived)(deployment.pk)
    for_operator, for_viewer = await operator.receive_from(5), await viewer.receive_from(5)
    for html in (for_operator, for_viewer):
        assert html.startswith('<section id="deployment-files"') and 'hx-swap-oob="true"' in html
        assert "Model files: On every machine (1)." in html and "copied 1.0 GiB" in html
    assert 'id="sync-files"' in for_operator and 'id="sync-files"' not in for_viewer
    await operator.disconnect()
    await viewer.disconnect()


async def test_a_socket_that_connects_late_first_gets_what_changed_meanwhile(bob, red):
    """The page is rendered, then its socket connects: a change in between is not lost."""
    deployment = await sync_to_async(factories.make_deployment)("live-late", red)
    await sync_to_async(move_deployment)(deployment.pk, DeploymentState.DEPLOYING, message="placed")
    late = connect(bob, f"deployment-{deployment.pk}")
    caught_up = await joined(late)
    assert 'data-state="DEPLOYING"' in caught_up and 'hx-swap-oob="true"' in caught_up
    assert 'id="deployment-copies"' in caught_up and 'id="deployment-files"' in caught_up
    assert await late.receive_nothing(timeout=0.5)
    await late.disconnect()


async def test_pages_keep_updating_while_the_gateway_follows_broadcasts_in_the_same_process(
    bob, red
):
    """The console's process also runs the gateway's broadcast follower (the chat page uses
    it); its receive on the shared layer must not starve the page consumers'."""
    import asyncio
    import contextlib

    from gateway.service import Gateway

    deployment = await sync_to_async(factories.make_deployment)("live-gateway", red)
    gateway = Gateway.__new__(Gateway)  # only the follower runs; it needs no HTTP client
    gateway.directory = type("Directory", (), {"refresh_soon": lambda self: None})()
    follower = asyncio.create_task(gateway.follow_broadcasts())
    await asyncio.sleep(0.5)  # the follower now waits on the layer
    page = connect(bob, f"deployment-{deployment.pk}")
    await joined(page)
    # Only the page's group hears of this one (as of a copy's change): nothing wakes the follower.
    await sync_to_async(live.broadcast)(f"deployment-{deployment.pk}", "copy", 0)
    html = await page.receive_from(5)
    assert 'id="deployment-copies"' in html
    follower.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follower  # ended here: no receive of this test's loop is left holding the layer
    await page.disconnect()


async def closed_with(communicator: WebsocketCommunicator) -> int:
    """The next thing the socket sends is its close (nothing of the group before it)."""
    output = await communicator.receive_output(5)
    assert output["type"] == "websocket.close", output
    await communicator.disconnect()  # as the server answers a close: the consumer ends
    return int(output["code"])


async def test_a_user_removed_from_the_team_hears_nothing_more_of_its_deployment(bob, red):
    from console.models import Membership

    deployment = await sync_to_async(factories.make_deployment)("live-gone", red)
    listening = connect(bob, f"deployment-{deployment.pk}")
    await joined(listening)
    await sync_to_async(Membership.objects.filter(user=bob, team=red).delete)()
    await sync_to_async(move_deployment)(deployment.pk, DeploymentState.DEPLOYING, message="placed")
    assert await closed_with(listening) == 4403


async def test_a_downgraded_user_keeps_listening_but_gets_a_viewers_parts(bob, red):
    from console.models import Membership, Role

    deployment = await sync_to_async(factories.make_deployment)("live-down", red)
    listening = connect(bob, f"deployment-{deployment.pk}")
    await joined(listening)
    membership = await sync_to_async(Membership.objects.get)(user=bob, team=red)
    membership.role = Role.VIEWER
    await sync_to_async(membership.save)()
    await sync_to_async(move_deployment)(deployment.pk, DeploymentState.DEPLOYING, message="placed")
    html = await listening.receive_from(5)
    assert 'data-state="DEPLOYING"' in html and ">Stop…</a>" not in html
    await listening.disconnect()


async def test_a_user_who_logs_out_hears_nothing_more(bob, red):
    from django.contrib.auth import logout
    from django.contrib.sessions.backends.db import SessionStore
    from django.test import RequestFactory

    deployment = await sync_to_async(factories.make_deployment)("live-out", red)
    listening = connect(bob, f"deployment-{deployment.pk}")
    await joined(listening)

    def log_out() -> None:  # what the logout page does with the user's request
        request = RequestFactory().post("/logout/")
        request.user, request.session = bob, SessionStore()
        logout(request)

    await sync_to_async(log_out)()
    await sync_to_async(move_deployment)(deployment.pk, DeploymentState.DEPLOYING, message="placed")
    assert await closed_with(listening) == 4401


async def test_a_log_socket_from_the_start_replays_only_the_last_page(bob, red):
    deployment = await sync_to_async(factories.make_deployment)("live-long", red)
    await sync_to_async(add_lines)(deployment, [f"line-{n:04d}" for n in range(1, 451)])
    reading = connect(bob, f"deployment-{deployment.pk}-logs", "after=0")
    assert (await reading.connect())[0]
    html = await reading.receive_from(5)
    assert "line-0251" in html and "line-0450" in html  # the newest 200
    assert "line-0250" not in html and "line-0001" not in html  # older ones are the page's
    assert await reading.receive_nothing(timeout=0.5)
    await reading.disconnect()


async def test_a_user_s_sockets_are_capped_and_a_closed_one_frees_its_place(bob, red, settings):
    settings.SOCKETS_PER_USER = 3
    deployment = await sync_to_async(factories.make_deployment)("live-many", red)
    group = f"deployment-{deployment.pk}"
    tabs = [connect(bob, group) for _ in range(3)]
    for tab in tabs:
        await joined(tab)
    one_too_many = connect(bob, group)
    connected, code = await one_too_many.connect()
    assert not connected and code == 4429
    await tabs[0].disconnect()
    again = connect(bob, group)
    await joined(again)
    for tab in [*tabs[1:], again]:
        await tab.disconnect()


def host_new(user, team, name: str):
    from deployments import actions

    model = factories.make_model()
    cluster = factories.make_cluster("live-lab", gpus=2)
    asked = actions.HostRequest(team, model, model.variants.first(), cluster, name)
    return actions.host(user, asked)


async def test_a_deployment_hosted_meanwhile_arrives_on_top_of_open_lists_it_passes(
    bob, carol, dave, red
):
    """Every open deployments list hears of a new deployment: a row to put on top (and the
    empty note gone) for those who may see it and whose filters, the socket's query, it passes."""
    everything, filtered, viewer, outsider = (
        connect(bob, "deployments"),
        connect(bob, "deployments", "q=another"),
        connect(carol, "deployments"),
        connect(dave, "deployments"),
    )
    for socket in (everything, filtered, viewer, outsider):
        assert (await socket.connect())[0]
    deployment = await sync_to_async(host_new)(bob, red, "fresh")
    row = await everything.receive_from(5)
    assert row.strip().startswith('<tbody hx-swap-oob="afterbegin:#deployment-rows">')
    assert f'id="deployment-row-{deployment.pk}"' in row and ">fresh</a>" in row
    assert 'aria-label="Select fresh"' in row  # bob operates red: the row has its box
    assert '<div id="deployments-empty" hx-swap-oob="true"></div>' in row
    seen_by_viewer = await viewer.receive_from(5)
    assert ">fresh</a>" in seen_by_viewer and 'aria-label="Select fresh"' not in seen_by_viewer
    # A list filtered to other names may still hear the row change state (its page has no such
    # row, so nothing changes there), but is never asked to add it.
    while not await filtered.receive_nothing(timeout=0.5):
        assert "afterbegin" not in await filtered.receive_from(1)
    assert await outsider.receive_nothing(timeout=0.5)
    for socket in (everything, filtered, viewer, outsider):
        await socket.disconnect()


async def test_viewers_of_one_log_each_get_every_line_once_with_times_in_their_own_zone(
    bob, carol, red
):
    """The lines are read once for all of a log's viewers in a process (console/live_logs.py),
    but what each is sent is still its own: the times in its zone."""
    from datetime import UTC, datetime

    deployment = await sync_to_async(factories.make_deployment)("live-zones", red)
    viewers = {}
    for name, user, zone in (
        ("tokyo", bob, "Asia/Tokyo"),
        ("utc", carol, "UTC"),
        ("tokyo-too", bob, "Asia/Tokyo"),
    ):
        viewer = connect(user, f"deployment-{deployment.pk}-logs", "after=0")
        viewer.scope["cookies"]["berth_time_zone"] = zone
        assert (await viewer.connect())[0]
        viewers[name] = viewer
    noon = datetime(2026, 12, 5, 12, 0, 7, tzinfo=UTC)
    lines = [(None, LogStream.ENGINE, "INFO", noon, f"zoned line {n}") for n in range(3)]
    await sync_to_async(write_lines)(deployment.pk, lines)
    for name, viewer in viewers.items():
        received = ""
        while "zoned line 2" not in received:
            received += await viewer.receive_from(5)
        assert [received.count(f"zoned line {n}") for n in range(3)] == [1, 1, 1], name
        assert ("21:00:07" in received) == name.startswith("tokyo"), name
        assert ("12:00:07" in received) == (name == "utc"), name
        assert await viewer.receive_nothing(timeout=0.3)
        await viewer.disconnect()
