"""Model files on the machines of a cluster: a copy's start brings them to its machine, Sync
brings them to every ready machine, with progress, and the deployment's page says on how many.
Run with the real worker, beat and watcher against a simulated cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from catalog.models import Model, ServerModel
from clusters.backends.simulator import discover_inventory
from clusters.inventory import apply_discovery
from clusters.models import Cluster
from console import claims
from deployments import actions, machine_files
from deployments.choices import DeploymentState
from deployments.models import Deployment, Event, MachineFiles
from tests.integration.test_lifecycle import FAST_ENGINE, H100
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
# Slow enough that a copy of Qwen3-0.6B's 1.1 GiB takes about two seconds to watch.
COPY_RATE = str(2**29)


def machine(name: str, ready: bool = True) -> dict:
    accelerators = [{**H100, "index": 0, "uuid": f"GPU-{name}-0"}]
    return {"name": name, "cpus": 32, "system_memory_gib": 256, "accelerators": accelerators,
            "ready": ready}  # fmt: skip


def three_machines(name: str) -> Cluster:
    """Two ready machines and one that is not."""
    machines = [machine(f"{name}-a"), machine(f"{name}-b"), machine(f"{name}-c", ready=False)]
    inventory = {"machines": machines, "engine_env": FAST_ENGINE}
    cluster = Cluster.objects.create(
        name=name, kind="simulator", sharing_strategy="fractional", simulated_inventory=inventory
    )
    apply_discovery(cluster, discover_inventory(inventory))
    return cluster


@pytest.fixture
def running(tmp_path, db):
    call_command("load_catalog")
    with console_processes(tmp_path, BERTH_SIMULATOR_COPY_BYTES_PER_S=COPY_RATE) as processes:
        yield processes


def kept_on_this_server(variant) -> ServerModel:
    return ServerModel.objects.create(
        variant=variant,
        revision="4d6fb5e9f8a1c0b2a3d4e5f60718293a4b5c6d7e",
        state="ready",
        size_bytes=variant.size_bytes,
        path=f"/models/{variant.pk}",
        files=[["config.json", 726], ["model.safetensors", variant.size_bytes - 726]],
    )


def host(bob, red, cluster, name: str) -> Deployment:
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    variant = model.variants.get(name="bf16")
    kept_on_this_server(variant)
    asked = actions.HostRequest(
        team=red,
        model=model,
        variant=variant,
        cluster=cluster,
        name=name,
        engine_settings={"max_model_len": 4096},
    )
    return actions.host(bob, asked)


def files_on(deployment: Deployment) -> tuple[int, int]:
    summary = machine_files.summary(Deployment.objects.get(pk=deployment.pk))
    return summary.on, summary.of


def rows(deployment: Deployment) -> dict[str, MachineFiles]:
    found = MachineFiles.objects.filter(variant=deployment.variant).select_related("machine")
    return {row.machine.name: row for row in found}


def test_sync_copies_the_files_to_every_ready_machine_with_progress(
    running, tmp_path, client, bob, red
):
    cluster = three_machines("files")
    deployment = host(bob, red, cluster, "synced")
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED,
        90,
        what="DEPLOYED",
    )
    # The copy's start brought the files to its own machine only.
    assert files_on(deployment) == (1, 3)
    (placed,) = [name for name, row in rows(deployment).items() if row.state == "present"]
    client.force_login(bob)
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Model files: On 1 of 3 machines." in page and 'id="sync-files"' in page

    answer = client.post(f"/deployments/{deployment.pk}/sync/", follow=True).content.decode()
    assert "Syncing the model files to 2 machines; 1 not ready, left out." in answer
    other = next(name for name in ("files-a", "files-b") if name != placed)
    # The machine without the files shows its bytes arriving, then has them.
    copying = wait_for(
        lambda: (row := rows(deployment)[other]).state == "copying" and row.progress_bytes > 0,
        30,
        every=0.05,
        what="the copy to report its bytes",
    )
    assert copying
    wait_for(lambda: files_on(deployment) == (2, 3), 30, what="the files on both ready machines")
    found = rows(deployment)
    assert found[placed].message == f"the model is already on {placed}"
    assert found[other].message.startswith(f"copied 1.12 GiB to {other}")
    assert found[other].progress_bytes == found[other].size_bytes
    assert "files-c" not in found  # not ready: left out, and the page says it was
    marker = next((Path(tmp_path) / f"cluster-{cluster.pk}/machines/{other}/files").glob("*.json"))
    assert json.loads(marker.read_text())["repo_id"] == "Qwen/Qwen3-0.6B"

    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Model files: On 2 of 3 machines." in page and "Not ready" in page
    assert Event.objects.filter(deployment=deployment, message__startswith="Sync: ").exists()


def test_viewers_see_the_files_but_cannot_sync(client, carol, red, bob):
    from tests import factories

    deployment = factories.make_deployment("looked-at", red)
    kept_on_this_server(deployment.variant)
    client.force_login(carol)
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Model files: On 0 of 1 machine." in page and 'id="sync-files"' not in page
    assert client.post(f"/deployments/{deployment.pk}/sync/").status_code == 403
    assert client.post(f"/api/v1/deployments/{deployment.pk}/sync").status_code == 403
    assert not MachineFiles.objects.exists()
    listed = client.get(f"/api/v1/deployments/{deployment.pk}/files").json()
    assert (listed["on"], listed["of"], listed["machines"][0]["state"]) == (0, 1, None)
    client.force_login(bob)  # only the role stopped the viewer: an operator's Sync goes through
    assert client.post(f"/deployments/{deployment.pk}/sync/").status_code == 302
    assert MachineFiles.objects.get().state == "queued"


def test_sync_before_the_download_ends_says_what_to_wait_for(client, bob, red):
    from tests import factories

    deployment = factories.make_deployment("early", red)
    ServerModel.objects.create(variant=deployment.variant, state="downloading")
    client.force_login(bob)
    page = client.post(f"/deployments/{deployment.pk}/sync/", follow=True).content.decode()
    assert "Not done: the model is not on this server yet: wait for its download" in page
    answer = client.post(f"/api/v1/deployments/{deployment.pk}/sync")
    assert answer.status_code == 400
    assert "not on this server yet" in answer.json()["detail"]
    assert not MachineFiles.objects.exists()


def test_sync_through_the_api_queues_each_ready_machine_once(client, bob, red):
    from tests import factories

    deployment = factories.make_deployment("by-api", red)
    kept_on_this_server(deployment.variant)
    client.force_login(bob)
    first = client.post(f"/api/v1/deployments/{deployment.pk}/sync")
    assert first.status_code == 202
    body = first.json()
    assert body["message"] == "Syncing the model files to 1 machine."
    assert body["machines"][0]["state"] == "queued"
    # No worker runs in this test: the queued copy is still under way, so it is not queued twice.
    again = client.post(f"/api/v1/deployments/{deployment.pk}/sync").json()
    assert again["message"] == "Syncing the model files to 0 machines (1 already syncing)."
    assert MachineFiles.objects.count() == 1


def test_files_missing_at_launch_ask_for_a_new_download_and_it_goes_on_after(tmp_path, red, bob):
    """Standalone: the copy's machine is this one, and the files are where the server keeps
    them. One went missing → MUST_REDOWNLOAD naming it; the finished download starts it over."""
    import socket

    from catalog import downloads
    from catalog.variants import RepoFile
    from clusters.models import Machine
    from deployments import launching, transitions
    from deployments.choices import CopyState, ErrorCode
    from deployments.models import Copy
    from tests import factories

    cluster = Cluster.objects.create(name="here", kind="standalone")
    machine = Machine.objects.create(cluster=cluster, name=socket.gethostname())
    model = factories.make_model("acme/here")
    folder = tmp_path / "kept"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    kept = ServerModel.objects.create(
        variant=model.variants.get(),
        state="ready",
        revision="abc123",
        path=str(folder),
        size_bytes=102,
        files=[["config.json", 2], ["model.safetensors", 100]],
    )
    deployment = factories.make_deployment("here-one", red, cluster=cluster, model=model)
    copy = factories.make_copy(deployment)
    Copy.objects.filter(pk=copy.pk).update(machine=machine)
    transitions.move_copy(copy.pk, CopyState.COPYING_FILES, message="Placed.")

    launching.prepare(copy.pk)

    copy = Copy.objects.get(pk=copy.pk)
    assert (copy.state, copy.last_error_code) == (CopyState.FAILED, ErrorCode.MUST_REDOWNLOAD)
    assert f"1 file(s) missing in {folder}: model.safetensors" in copy.last_error_message
    deployment.refresh_from_db()
    assert deployment.state == DeploymentState.MUST_REDOWNLOAD
    assert "model.safetensors" in deployment.last_message
    kept.refresh_from_db()
    assert kept.state == "must_redownload"
    (row,) = MachineFiles.objects.filter(machine=machine)
    assert row.state == "missing" and "model.safetensors" in row.message

    # Try again on this server; the download brings the file back and the deployment goes on.
    downloads.try_again(kept, bob)
    assert downloads.claim(kept.pk) is not None
    (folder / "model.safetensors").write_bytes(b"w" * 100)
    files = (RepoFile("config.json", 2), RepoFile("model.safetensors", 100))
    downloads.finish(kept.pk, downloads.Plan("abc123", files, folder))
    deployment.refresh_from_db()
    assert deployment.state == DeploymentState.REQUESTED
    assert deployment.last_message == "The model's files are on this server now; starting."


def test_a_sync_its_worker_left_behind_is_queued_again_once(red):
    from datetime import timedelta

    from django.utils import timezone

    from tests import factories

    deployment = factories.make_deployment("left-behind", red)
    kept = kept_on_this_server(deployment.variant)
    row = machine_files.row_for(deployment.cluster.machines.get(), kept)
    long_ago = timezone.now() - claims.STALLED_AFTER - timedelta(seconds=5)
    MachineFiles.objects.filter(pk=row.pk).update(state="copying", updated_at=long_ago)
    assert machine_files.redispatch_stalled() == 1
    assert MachineFiles.objects.get(pk=row.pk).state == "queued"
    assert machine_files.redispatch_stalled() == 0  # fresh again: not sent twice
    assert machine_files.claim(row.pk) is not None
    assert machine_files.claim(row.pk) is None  # a second delivery of the task copies nothing


def test_a_copy_whose_files_are_arriving_waits_for_them_and_is_not_sent_twice(red):
    from datetime import timedelta

    from django.utils import timezone

    from deployments import transitions
    from deployments.choices import CopyState
    from deployments.models import Copy
    from tests import factories

    deployment = factories.make_deployment("arriving", red)
    kept = kept_on_this_server(deployment.variant)
    machine = deployment.cluster.machines.get()
    copy = factories.make_copy(deployment)
    Copy.objects.filter(pk=copy.pk).update(machine=machine)
    transitions.move_copy(copy.pk, CopyState.COPYING_FILES, message="Placed.")
    row = machine_files.row_for(machine, kept)
    MachineFiles.objects.filter(pk=row.pk).update(state="copying", updated_at=timezone.now())
    copy = Copy.objects.select_related("machine").get(pk=copy.pk)

    # Another worker is copying the files there: this one does not wait on the same copy ...
    assert machine_files.copy_for_launch(copy, kept) is None
    waiting = Copy.objects.filter(state=CopyState.COPYING_FILES)
    # ... and the reconciler does not count the copy as abandoned while the bytes arrive.
    assert not waiting.exclude(machine_files.being_copied()).exists()
    quiet = timezone.now() - claims.STALLED_AFTER - timedelta(seconds=1)
    MachineFiles.objects.filter(pk=row.pk).update(updated_at=quiet)
    assert waiting.exclude(machine_files.being_copied()).get() == copy  # that worker died


def test_the_files_carry_the_teams_token_by_name_and_never_show_it(red):
    from tests import factories

    red.set_hf_token("hf_red_token_for_gated")
    red.save()
    deployment = factories.make_deployment("gated-files", red)
    kept = kept_on_this_server(deployment.variant)
    files = machine_files.model_files(kept, red)
    assert (files.token_owner, files.token) == ("red", "hf_red_token_for_gated")
    assert "hf_red_token_for_gated" not in repr(files)
    assert machine_files.model_files(kept).token == ""  # no team asked: no token goes along


def test_on_kubernetes_the_engine_names_the_commit_its_cache_was_filled_at(red):
    from deployments import launching
    from deployments.views import editor
    from tests import factories

    kube = Cluster.objects.create(name="kube", kind="kubernetes", namespace="berth")
    pinned = factories.make_deployment("pinned", red, cluster=kube)  # the default branch
    kept = kept_on_this_server(pinned.variant)
    argv = launching.engine_argv(factories.make_copy(pinned), 8000)
    assert argv[argv.index("--revision") + 1] == kept.revision
    assert editor.where_of(pinned).revision == kept.revision  # the preview says the same
    # Elsewhere the engine reads this server's folder or its own files: the revision asked for.
    simulated = factories.make_deployment("asked", red, revision="main")
    argv = launching.engine_argv(factories.make_copy(simulated), 8000)
    assert argv[argv.index("--revision") + 1] == "main"
