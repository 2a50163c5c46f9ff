"""The SDK's catalog and clusters against a running console, and its asynchronous client: what a
notebook sees when it lists, finds, adds and downloads models (from an emulated Hugging Face hub,
through the real transfers worker), reads the free room of a cluster as a deployment takes it,
and awaits the same calls with AsyncBerthClient. Real web server, worker, beat and watcher on
the test database; simulated engines."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from berth_sdk import (
    AsyncBerthClient,
    BadRequestError,
    BerthClient,
    DeploymentFailedError,
    DeploymentStatus,
    NotFoundError,
    PermissionDeniedError,
)
from berth_sdk import _calls as sdk_calls
from berth_sdk.results import Variant
from django.core.management import call_command

from catalog.models import Model, ServerModel
from console.models import ApiKey, KeyScope
from deployments.choices import DeploymentState, ErrorCode
from deployments.models import Deployment
from tests import factories
from tests.hub import running_hub, safetensors_repo
from tests.hub.server import EmulatedHub
from tests.integration.conftest import QWEN, Console
from tests.processes import console_processes, console_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

TOKEN = "hf_sdkcatalogtoken1234567890"
SETTINGS = {"max_model_len": 4096}
POLL_S = 0.2


@pytest.fixture
def emulated_hub() -> Iterator[EmulatedHub]:
    with running_hub() as server:
        yield server


@pytest.fixture
def console_with_hub(tmp_path, bob, emulated_hub) -> Iterator[Console]:
    """Web, worker, transfers, beat and watcher on the test database, all reading the emulated
    hub (HF_ENDPOINT) and downloading under tmp_path/models; bob's operate key."""
    call_command("load_catalog")
    key = ApiKey.issue(bob, "sdk catalog tests")[1]
    env = {"HF_ENDPOINT": emulated_hub.url, "BERTH_MODELS_DIR": str(tmp_path / "models")}
    with console_processes(tmp_path, **env), console_server(**env) as url:
        yield Console(url, key, gateway="")


def variant_of(client: BerthClient, repo_id: str, name: str = "bf16") -> Variant:
    return next(v for v in client.models.get(repo_id).variants if v.name == name)


def download_settles(client: BerthClient, repo_id: str) -> Variant:
    """The variant once its download is ready or failed, as the SDK reads it."""

    def settled() -> Variant | None:
        variant = variant_of(client, repo_id)
        done = variant.download is not None and variant.download.state in ("ready", "failed")
        return variant if done else None

    found = wait_for(settled, 60, what=f"the download of {repo_id} to settle")
    assert isinstance(found, Variant)
    return found


def test_models_are_listed_found_added_downloaded_and_tried_again(
    console_with_hub, emulated_hub, bob, carol, red
):
    emulated_hub.add(safetensors_repo("acme/Tiny-Qwen3", megabytes=0.5))
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={TOKEN}))
    red.set_hf_token(TOKEN)
    red.save()
    factories.make_model("acme/tyni")  # in the catalog, misspelt: not on the hub (yet)
    with console_with_hub.client() as client:
        # Listing: a search, and every page of the whole catalog.
        deepseek = {model.repo_id for model in client.models.list("deepseek")}
        assert deepseek == {
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
            "deepseek-ai/DeepSeek-V3",
            "deepseek-ai/DeepSeek-R1",
        }
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sdk_calls, "MOST_PER_PAGE", 4)  # 18 models: five pages
            every = [model.repo_id for model in client.models.list(sort="name")]
        in_the_catalog = Model.objects.order_by("name", "pk").values_list("repo_id", flat=True)
        assert len(every) == 18 and every == list(in_the_catalog)

        # One model, by its repository id or its catalog id: the same.
        qwen = client.models.get(QWEN)
        stored = Model.objects.get(repo_id=QWEN)
        assert (qwen.id, qwen.name, qwen.max_context) == (stored.pk, "Qwen3 0.6B", 40960)
        assert [v.name for v in qwen.variants] == [v.name for v in stored.variants.all()]
        assert client.models.get(stored.pk) == qwen == client.models.get(qwen)
        with pytest.raises(NotFoundError) as unknown:
            client.models.get("nobody/has-this")
        assert (unknown.value.status_code, unknown.value.field) == (404, "model")
        assert "nobody/has-this is not in the catalog" in unknown.value.message
        assert "models.add(repo_id) adds it" in unknown.value.message
        with pytest.raises(NotFoundError) as no_id:
            client.models.get(10**6)
        assert (
            no_id.value.message == "No model 1000000 in the catalog; GET /api/v1/models lists them."
        )

        # Adding from the hub; the console's refusals name the field to change.
        added = client.models.add("acme/Tiny-Qwen3")
        assert (added.repo_id, added.name, added.license) == (
            "acme/Tiny-Qwen3",
            "Tiny-Qwen3",
            "apache-2.0",
        )
        (bf16,) = added.variants
        assert (bf16.name, bf16.on_this_server, bf16.download) == ("bf16", False, None)
        assert client.models.get("acme/Tiny-Qwen3") == added
        with pytest.raises(BadRequestError) as twice:
            client.models.add("acme/Tiny-Qwen3")
        assert twice.value.field == "repo_id" and "already in the catalog" in twice.value.message
        with pytest.raises(BadRequestError) as nowhere:
            client.models.add("acme/not-on-the-hub")
        assert nowhere.value.field == "repo_id"
        assert nowhere.value.message == (
            "repo_id: acme/not-on-the-hub was not found on Hugging Face: check the spelling "
            "(owner/name, as in huggingface.co/owner/name). A private repository looks the same "
            "without a token that may read it."
        )
        with pytest.raises(BadRequestError) as gated:
            client.models.add("acme/gated")  # no team: no token to read a gated repository
        assert gated.value.field == "team" and "acme/gated is gated" in gated.value.message
        assert client.models.add("acme/gated", team="red").gated is True
        with pytest.raises(BadRequestError) as not_yours:
            client.models.add("acme/other", team="blue")  # bob only views blue
        assert not_yours.value.field == "team"
        assert "blue is not a team you operate; you operate red" in not_yours.value.message

        # Downloading: the real transfers worker fetches the files from the hub.
        started = client.models.download("acme/Tiny-Qwen3", "bf16")
        assert started.variants[0].download is not None
        assert started.variants[0].download.state in ("queued", "downloading", "ready")
        client.models.download("acme/gated", "bf16", team="red")  # with red's token
        ready = download_settles(client, "acme/Tiny-Qwen3")
        assert ready.download is not None and ready.download.error == ""
        assert (ready.on_this_server, ready.download.state) == (True, "ready")
        assert ready.download.size_gb == ready.download.progress_gb  # 0.5 MiB: 0.0 GiB
        row = ServerModel.objects.get(variant__model__repo_id="acme/Tiny-Qwen3")
        assert (Path(row.path) / "model.safetensors").is_file()
        gated_files = download_settles(client, "acme/gated")
        assert gated_files.download is not None and gated_files.download.error == ""
        assert gated_files.on_this_server is True
        with pytest.raises(NotFoundError) as no_variant:
            client.models.download(added.id, "fp8")
        assert no_variant.value.field == "variant"
        assert "acme/Tiny-Qwen3 has no variant fp8; its variants: bf16" in no_variant.value.message

        # A download that fails says why; once the repository exists, retry fetches it.
        with pytest.raises(BadRequestError) as nothing_failed:
            client.models.retry("acme/tyni", "bf16")
        assert nothing_failed.value.field == "variant"
        assert "has nothing to try again" in nothing_failed.value.message
        client.models.download("acme/tyni", "bf16")
        failed = download_settles(client, "acme/tyni")
        assert failed.download is not None and failed.on_this_server is False
        assert failed.download.state == "failed"
        assert failed.download.error == (
            "acme/tyni was not found on Hugging Face: check the spelling (owner/name, as in "
            "huggingface.co/owner/name). A private repository looks the same without a token "
            "that may read it."
        )
        emulated_hub.add(safetensors_repo("acme/tyni", megabytes=0.5))
        again = client.models.retry("acme/tyni", "bf16").variants[0]
        assert again.download is not None and again.download.error == ""
        assert again.download.state in ("queued", "downloading", "ready")
        fetched = download_settles(client, "acme/tyni")
        assert fetched.download is not None and fetched.download.state == "ready"
        assert fetched.on_this_server is True

    # Who may add: operators only, and a key of scope read reads only.
    viewer_key = ApiKey.issue(carol, "viewer's key")[1]
    read_key = ApiKey.issue(bob, "read only", scope=KeyScope.READ)[1]
    for key, words in [
        (viewer_key, "Only operators may do this."),
        (read_key, "This API key's scope is read"),
    ]:
        with BerthClient(base_url=console_with_hub.url, api_key=key) as refused_client:
            assert refused_client.models.get("acme/Tiny-Qwen3").id == added.id  # reading is fine
            with pytest.raises(PermissionDeniedError) as refused:
                refused_client.models.add("acme/other")
        assert refused.value.status_code == 403 and refused.value.message.startswith(words)
    assert not Model.objects.filter(repo_id="acme/other").exists()


def free_room(client: BerthClient, cluster: str) -> dict[tuple[str, int], tuple[float, int]]:
    """(machine, GPU index) → (free GiB, copies holding room), as clusters.get says."""
    free = client.clusters.get(cluster).free
    assert free is not None
    return {
        (machine["machine"], gpu["index"]): (gpu["free_gb"], gpu["copies"])
        for machine in free
        for gpu in machine["gpus"]
    }


def test_clusters_are_listed_found_and_their_free_room_shrinks_as_a_deployment_is_hosted(
    berth_console,
):
    with berth_console.client() as client:
        listed = list(client.clusters.list())
        assert [cluster.name for cluster in listed] == ["sdk", "stuck"]
        assert all(cluster.free is None for cluster in listed)  # the room: one cluster at a time
        assert [cluster.name for cluster in client.clusters.list("stu")] == ["stuck"]
        assert [c.name for c in client.clusters.list(kind="simulator", sort="-name")] == [
            "stuck",
            "sdk",
        ]
        assert list(client.clusters.list(kind="kubernetes")) == []

        sdk = client.clusters.get("sdk")
        assert client.clusters.get(sdk.id) == sdk == client.clusters.get(listed[0])
        assert sdk.id == listed[0].id and sdk.kind == "simulator"
        (machine,) = sdk.machines
        assert (machine.name, machine.gpu_count, len(machine.gpus)) == ("sdk-1", 2, 2)
        memory = {gpu.index: gpu.memory_gb for gpu in machine.gpus}
        before = free_room(client, "sdk")
        assert before == {("sdk-1", index): (memory[index], 0) for index in (0, 1)}
        with pytest.raises(NotFoundError) as nowhere:
            client.clusters.get("nowhere")
        assert nowhere.value.field == "cluster" and "no cluster named nowhere" in str(nowhere.value)
        with pytest.raises(NotFoundError) as no_id:
            client.clusters.get(10**6)
        assert no_id.value.status_code == 404 and no_id.value.message == "No such cluster."

        pk = client.serving.deploy_model(
            repo_id=QWEN,
            variant="bf16",
            cluster="sdk",
            engine_settings=SETTINGS,
            accelerators_per_copy=0.5,
            poll_interval_seconds=POLL_S,
            timeout_seconds=120,
        )
        (copy,) = client.serving.get_deployment(pk).copies
        (index,) = copy.gpu_indexes
        after = free_room(client, "sdk")
        held_free, held_copies = after[("sdk-1", index)]
        assert held_copies == 1 and 0 < copy.allocated_capacity_gb
        assert held_free == pytest.approx(memory[index] - copy.allocated_capacity_gb, abs=0.02)
        other = 1 - index
        assert after[("sdk-1", other)] == before[("sdk-1", other)]  # the other GPU: untouched
    assert Deployment.objects.get(pk=pk).state == DeploymentState.DEPLOYED


def test_the_async_client_awaits_the_same_surface(berth_console):
    with berth_console.client() as sync:
        sync_model = sync.models.get(QWEN)
        sync_cluster = sync.clusters.get("sdk")
        sync_vram = sync.serving.estimate_model_vram(QWEN, "bf16", max_model_len=8192)
        sync_searched = [model.repo_id for model in sync.models.list("qwen3", sort="name")]

    async def story() -> dict[str, Any]:
        async with AsyncBerthClient(base_url=berth_console.url, api_key=berth_console.key) as api:
            me = await api.me()
            model = await api.models.get(QWEN)
            by_id = await api.models.get(model.id)
            searched = [m.repo_id async for m in api.models.list("qwen3", sort="name")]
            with pytest.raises(NotFoundError) as unknown:
                await api.models.get("nobody/has-this")
            cluster = await api.clusters.get("sdk")
            clusters = [c.name async for c in api.clusters.list()]
            no_usage = [row async for row in api.usage(group_by="deployment", bucket="hour")]
            with pytest.raises(BadRequestError) as bad_bucket:
                [row async for row in api.usage(bucket="week")]
            pk = await api.serving.deploy_model(
                repo_id=QWEN,
                variant="bf16",
                cluster="sdk",
                engine_settings=SETTINGS,
                name="awaited",
                poll_interval_seconds=POLL_S,
                timeout_seconds=120,
            )
            status = await api.serving.get_deployment_status(pk)
            by_name = await api.serving.get_deployment("awaited")
            serving = [d.id async for d in api.serving.list_deployments(state="serving")]
            on_sdk = [d.name async for d in api.serving.list_deployments(cluster="sdk")]
            vram = await api.serving.estimate_model_vram(QWEN, "bf16", max_model_len=8192)
            with pytest.raises(DeploymentFailedError) as failed:
                await api.serving.deploy_model(
                    repo_id="deepseek-ai/DeepSeek-V3",
                    variant="fp8",
                    cluster="sdk",
                    poll_interval_seconds=POLL_S,
                    timeout_seconds=60,
                )
        return locals()

    seen = asyncio.run(story())
    me = seen["me"]
    assert me.username == "bob" and me.platform_admin is False
    assert [(t.team, t.role) for t in me.teams] == [("blue", "viewer"), ("red", "operator")]
    assert me.gateway_url == f"{berth_console.gateway}/v1"
    assert seen["model"] == seen["by_id"] == sync_model
    assert seen["searched"] == sync_searched and QWEN in sync_searched
    assert seen["unknown"].value.field == "model"
    assert "nobody/has-this is not in the catalog" in seen["unknown"].value.message
    assert seen["cluster"] == sync_cluster and seen["cluster"].free is not None
    assert seen["clusters"] == ["sdk", "stuck"]
    assert seen["no_usage"] == []  # nothing through the gateway yet
    assert seen["bad_bucket"].value.message == "bucket: 'week' is not one of hour, day"

    pk = seen["pk"]
    assert seen["status"] is DeploymentStatus.DEPLOYED
    assert Deployment.objects.get(pk=pk).state == DeploymentState.DEPLOYED
    assert (seen["by_name"].id, seen["by_name"].model, seen["by_name"].cluster) == (
        pk,
        QWEN,
        "sdk",
    )
    assert seen["serving"] == [pk]
    assert seen["vram"] == sync_vram > 0

    failed = seen["failed"].value
    stored = Deployment.objects.get(pk=failed.deployment_id)
    assert failed.status is DeploymentStatus.FAILED and stored.state == DeploymentState.FAILED
    assert failed.last_error_code == ErrorCode.NO_FIT == "NoFitError"
    assert failed.last_error_message == stored.last_error_message
    assert "NoFitError: Each copy needs" in str(failed)
    # Listed before the failed one was asked for: only the one it hosted.
    assert seen["on_sdk"] == ["awaited"]
