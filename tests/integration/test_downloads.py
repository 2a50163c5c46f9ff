"""Downloads against an emulated Hugging Face hub (a real HTTP server on 127.0.0.1).

The download task runs for real: called in the test process for the mechanics, and once
through the real Celery worker (started with HF_ENDPOINT pointing at the emulated hub).
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from catalog import downloads, tasks
from catalog.models import ServerModel, Variant
from console import claims
from deployments import actions
from deployments.choices import DeploymentState
from deployments.guard import state_change_allowed
from deployments.models import Deployment
from tests import factories
from tests.conftest import logged_in
from tests.hub import (
    config_files,
    gguf_bytes,
    gguf_repo,
    running_hub,
    safetensors_bytes,
    safetensors_repo,
)
from tests.hub.server import Commit, Repo
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "hf_redteamtoken1234567890"
MiB = 2**20


@pytest.fixture
def emulated_hub(monkeypatch):
    with running_hub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def models_dir(settings, tmp_path):
    settings.MODELS_DIR = tmp_path / "models"
    return settings.MODELS_DIR


def variant_of(repo_id: str, fmt: str = "safetensors", gguf_file: str = "") -> Variant:
    model = factories.make_model(repo_id)
    variant = model.variants.get()
    if fmt == "gguf":
        Variant.objects.filter(pk=variant.pk).update(
            name="gguf-q4_k_m", format="gguf", gguf_file=gguf_file, engine="llamacpp"
        )
        variant.refresh_from_db()
    return variant


def download(variant: Variant, revision: str = "", team=None, actor=None) -> ServerModel:
    row = downloads.request_download(variant, revision, team, actor)
    tasks.download_model(row.pk)  # the task's own function, run here
    return ServerModel.objects.get(pk=row.pk)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def in_thread(row_id: int) -> threading.Thread:
    def work() -> None:
        try:
            tasks.download_model(row_id)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_a_public_model_downloads_with_progress_and_its_commit_pinned(
    emulated_hub, models_dir, bob, red, monkeypatch
):
    monkeypatch.setattr(downloads, "PROGRESS_EVERY_S", 0.2)
    shards = {
        f"model-0000{i}-of-00003.safetensors": safetensors_bytes(mb, seed=i)
        for i, mb in [(1, 0.25), (2, 0.75), (3, 1.5)]
    }
    repo = emulated_hub.add(Repo("acme/tiny", [Commit({**config_files(), **shards})]))
    emulated_hub.rate = 1 * MiB  # per file: the shards end at about 0.25, 0.75 and 1.5 s
    row = downloads.request_download(variant_of("acme/tiny"), "", red, bob)
    assert row.state == "queued"
    worker = in_thread(row.pk)
    seen = wait_for(
        lambda: ServerModel.objects.filter(
            pk=row.pk, state="downloading", progress_bytes__gt=0, size_bytes__gt=0
        ).first(),
        20,
        every=0.05,
        what="progress while downloading",
    )
    assert 0 < seen.progress_bytes < seen.size_bytes
    worker.join(30)
    done = ServerModel.objects.get(pk=row.pk)
    commit = repo.commits[0]
    assert (done.state, done.error, done.revision) == ("ready", "", commit.sha)
    fetched = sum(len(content) for name, content in commit.files.items() if name != "README.md")
    assert done.progress_bytes == done.size_bytes == fetched
    folder = Path(done.path)
    assert folder == models_dir / "acme/tiny" / "bf16" / commit.sha
    for name, content in shards.items():
        assert (folder / name).read_bytes() == content
    assert not (folder / "README.md").exists()  # allow-patterns: only what the engine reads
    assert sorted(f[0] for f in done.files) == sorted(
        ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
        + list(shards)
    )
    assert done.started_at and done.finished_at


def test_a_gated_model_fails_without_a_token_and_downloads_once_the_team_has_one(
    emulated_hub, models_dir, bob, red, caplog
):
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={TOKEN}))
    variant = variant_of("acme/gated")
    failed = download(variant, "", red, bob)
    assert failed.state == "failed"
    assert failed.error == (
        "acme/gated is gated: its files need a Hugging Face token with access. Ask a platform "
        "admin to set the Hugging Face token of team red (Admin → Teams), accept the model's "
        "licence on huggingface.co/acme/gated with that account, then select Try again."
    )
    red.set_hf_token(TOKEN)
    red.save()
    again = downloads.try_again(failed, bob)
    assert again.state == "queued" and again.error == ""
    tasks.download_model(again.pk)
    done = ServerModel.objects.get(pk=again.pk)
    assert done.state == "ready"
    assert any(r["with_token"] for r in emulated_hub.requests if "/resolve/" in r["path"])
    assert TOKEN not in caplog.text and TOKEN not in done.error


def test_a_token_without_access_to_a_gated_model_says_so(emulated_hub, models_dir, bob, red):
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={"hf_someoneelse"}))
    emulated_hub.known_tokens.add(TOKEN)
    red.set_hf_token(TOKEN)
    red.save()
    failed = download(variant_of("acme/gated"), "", red, bob)
    assert failed.state == "failed"
    assert failed.error.startswith(
        "acme/gated is gated and the Hugging Face token of team red has no access to it: "
        "accept the model's licence on huggingface.co/acme/gated with the account that owns "
        "the token"
    )
    assert TOKEN not in failed.error


def test_a_misspelt_repository_fails_with_not_found_and_try_again_works_once_it_exists(
    emulated_hub, models_dir, bob, red
):
    variant = variant_of("acme/tyni")
    failed = download(variant, "", red, bob)
    assert failed.state == "failed"
    assert failed.error == (
        "acme/tyni was not found on Hugging Face: check the spelling (owner/name, as in "
        "huggingface.co/owner/name). A private repository looks the same without a token "
        "that may read it."
    )
    emulated_hub.add(safetensors_repo("acme/tyni"))
    again = downloads.try_again(failed, bob)
    tasks.download_model(again.pk)
    assert ServerModel.objects.get(pk=again.pk).state == "ready"


def test_an_interrupted_download_resumes_from_where_the_connection_dropped(
    emulated_hub, models_dir, bob, red
):
    # huggingface_hub writes 10 MiB at a time; the cut half-way through 22 MiB leaves one
    # chunk on disk, and the retry asks only for the rest.
    weights = safetensors_bytes(22)
    emulated_hub.add(
        Repo("acme/big", [Commit({"config.json": b"{}", "model.safetensors": weights})])
    )
    emulated_hub.drop_once.add(("acme/big", "model.safetensors"))
    done = download(variant_of("acme/big"), "", red, bob)
    assert done.state == "ready", done.error
    gets = [
        r["range"]
        for r in emulated_hub.requests
        if r["method"] == "GET" and r["path"].endswith("model.safetensors")
    ]
    assert gets == ["", "bytes=10485760-"]
    assert digest(Path(done.path) / "model.safetensors") == hashlib.sha256(weights).hexdigest()


def test_a_revision_is_pinned_by_its_commit_and_an_unknown_one_says_so(
    emulated_hub, models_dir, bob, red
):
    old = Commit({**config_files(), "model.safetensors": safetensors_bytes(0.1, seed=1)})
    new = Commit({**config_files(), "model.safetensors": safetensors_bytes(0.1, seed=2)})
    emulated_hub.add(Repo("acme/tagged", [old, new], refs={"v1": old.sha}))
    variant = variant_of("acme/tagged")
    tagged = download(variant, "v1", red, bob)
    latest = download(variant, "", red, bob)
    assert (tagged.requested_revision, tagged.revision) == ("v1", old.sha)
    assert latest.revision == new.sha and tagged.pk != latest.pk
    saved = (Path(tagged.path) / "model.safetensors").read_bytes()
    assert saved == old.files["model.safetensors"]
    by_sha = download(variant, old.sha, red, bob)
    assert by_sha.revision == old.sha and by_sha.state == "ready"
    unknown = download(variant, "v9", red, bob)
    assert unknown.state == "failed"
    assert unknown.error == (
        "acme/tagged has no revision “v9”: give a branch, tag or commit of that repository, "
        "or leave the revision empty for main."
    )


def test_a_gguf_variant_downloads_only_its_own_file(emulated_hub, models_dir, bob, red):
    other = gguf_bytes(64)
    repo = gguf_repo("acme/tiny-GGUF")
    repo.commits[0].files["Tiny-Q8_0.gguf"] = other
    emulated_hub.add(repo)
    variant = variant_of("acme/tiny-GGUF", fmt="gguf", gguf_file="Tiny-Q4_K_M.gguf")
    done = download(variant, "", red, bob)
    assert done.state == "ready", done.error
    assert [f[0] for f in done.files] == ["Tiny-Q4_K_M.gguf"]
    assert (Path(done.path) / "Tiny-Q4_K_M.gguf").exists()
    assert not (Path(done.path) / "Tiny-Q8_0.gguf").exists()


def test_request_download_is_idempotent_and_queues_a_failed_one_again(
    emulated_hub, models_dir, bob, red
):
    variant = variant_of("acme/missing")
    first = downloads.request_download(variant, "", red, bob)
    assert downloads.request_download(variant, "", red, bob).pk == first.pk
    tasks.download_model(first.pk)
    assert ServerModel.objects.get(pk=first.pk).state == "failed"
    again = downloads.request_download(variant, "", red, bob)
    assert (again.pk, again.state) == (first.pk, "queued")
    assert ServerModel.objects.filter(variant=variant).count() == 1
    with pytest.raises(downloads.DownloadRefused, match="is not a branch, tag or commit name"):
        downloads.request_download(variant, "bad revision", red, bob)


def test_a_task_delivered_twice_downloads_once(emulated_hub, models_dir, bob, red):
    emulated_hub.add(safetensors_repo("acme/once", megabytes=0.1))
    row = downloads.request_download(variant_of("acme/once"), "", red, bob)
    assert downloads.claim(row.pk) is not None
    assert downloads.claim(row.pk) is None  # claimed: a second delivery changes nothing
    ServerModel.objects.filter(pk=row.pk).update(state="queued")
    tasks.download_model(row.pk)
    tasks.download_model(row.pk)
    resolves = [r for r in emulated_hub.requests if r["path"].endswith("/model.safetensors")]
    assert [r["method"] for r in resolves] == ["HEAD", "GET"]
    assert ServerModel.objects.get(pk=row.pk).state == "ready"


def test_a_download_its_worker_left_is_queued_again_once(models_dir, bob, red):
    row = downloads.request_download(variant_of("acme/left"), "", red, bob)
    long_ago = timezone.now() - claims.STALLED_AFTER - timedelta(seconds=1)
    ServerModel.objects.filter(pk=row.pk).update(state="downloading", updated_at=long_ago)
    assert downloads.redispatch_stalled() == 1
    assert ServerModel.objects.get(pk=row.pk).state == "queued"
    assert downloads.redispatch_stalled() == 0  # fresh again: not sent twice
    assert downloads.claim(row.pk) is not None


def test_delete_files_is_refused_while_a_deployment_uses_them_and_removes_them_after(
    emulated_hub, models_dir, alice, bob, red
):
    emulated_hub.add(safetensors_repo("acme/used", megabytes=0.1))
    variant = variant_of("acme/used")
    row = download(variant, "", red, alice)
    deployment = factories.make_deployment("uses-it", red, model=variant.model)
    with pytest.raises(downloads.DownloadRefused, match="Deployments use these files: uses-it"):
        actions.delete_server_files(alice, row)
    with state_change_allowed():
        Deployment.objects.filter(pk=deployment.pk).update(state=DeploymentState.STOPPED)
    assert actions.delete_server_files(alice, row).words == f"Deleted the files of {variant}."
    assert not Path(row.path).exists() and not ServerModel.objects.filter(pk=row.pk).exists()


# --- through the real worker -----------------------------------------------------------------


def test_the_worker_downloads_a_gated_model_bob_asked_for_and_logs_no_token(
    emulated_hub, bob, red, tmp_path
):
    emulated_hub.add(
        safetensors_repo("acme/worker", megabytes=0.5, gated=True, allowed_tokens={TOKEN})
    )
    red.set_hf_token(TOKEN)
    red.save()
    variant = variant_of("acme/worker")
    models = Path(
        getattr(django_settings, "MODELS_DIR", django_settings.BASE_DIR / "var" / "models")
    )
    env = {"HF_ENDPOINT": emulated_hub.url, "BERTH_MODELS_DIR": str(tmp_path / "models")}
    try:
        with console_processes(tmp_path, **env) as processes:
            response = logged_in(bob).post(
                f"/models/{variant.model_id}/download/",
                {"variant": variant.pk, "revision": "", "team": red.pk},
            )
            assert response.status_code == 302
            row = ServerModel.objects.get(variant=variant)
            wait_for(
                lambda: ServerModel.objects.filter(
                    pk=row.pk, state__in=["ready", "failed"]
                ).exists(),
                60,
                what="the worker to finish the download",
            )
            log = processes.log("transfers")  # downloads have their own worker
        done = ServerModel.objects.get(pk=row.pk)
        assert done.state == "ready", done.error
        assert done.revision == emulated_hub.repos["acme/worker"].commits[0].sha
        assert (Path(done.path) / "model.safetensors").exists()
        assert "catalog.tasks.download_model" in log and TOKEN not in log
    finally:
        # Until MODELS_DIR is a setting, the worker writes under var/models: clean up there.
        shutil.rmtree(models / "acme" / "worker", ignore_errors=True)
        if (models / "acme").exists() and not any((models / "acme").iterdir()):
            (models / "acme").rmdir()
