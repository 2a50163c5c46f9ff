"""Catalog pages: the marketplace and its filters, a model's page with memory guidance, adding a
model (by repository id against the emulated hub, and from a path), and On this server.

Viewers browse; operators download and add by repository id; only platform admins add from a
path and delete files; a team's Hugging Face token never appears in a page.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from catalog.models import Model, ServerModel, Variant
from console.models import Team
from deployments.guard import state_change_allowed
from deployments.models import Deployment
from tests import factories
from tests.hub import (
    config_files,
    gguf_repo,
    running_hub,
    safetensors_bytes,
    safetensors_repo,
    upstream_config,
)
from tests.hub.server import Commit, Repo

pytestmark = pytest.mark.django_db
TOKEN = "hf_secretpagetoken987654321"
FACTS = [
    "architecture",
    "layers",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_context",
    "sliding_window",
    "global_layers",
    "mla",
    "encoder_only",
]


@pytest.fixture
def catalog(db):
    call_command("load_catalog")


@pytest.fixture
def emulated_hub(monkeypatch):
    with running_hub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def text(response) -> str:
    return response.content.decode()


def card_names(response) -> list[str]:
    return [m.repo_id for m in response.context["models"]]


# --- marketplace -----------------------------------------------------------------------------


def test_the_empty_catalog_says_so(as_carol):
    assert "The catalog is empty." in text(as_carol.get("/models/"))


def test_cards_show_size_context_licence_and_whether_the_model_is_on_this_server(catalog, as_carol):
    variant = Variant.objects.get(model__repo_id="Qwen/Qwen3-8B", name="bf16")
    ServerModel.objects.create(variant=variant, state="ready", size_bytes=1)
    page = text(as_carol.get("/models/"))
    card = page[page.index('id="model-' + str(variant.model_id)) :][:1200]
    assert "8.2 B parameters · 40,960 tokens context · apache-2.0" in card
    assert "on this server" in card and "from 4.62 GiB" in card
    assert "Chat, Reasoning, Tool calling" in card


@pytest.mark.parametrize(
    "query,expected",
    [
        ("family=Gemma+3", {"google/gemma-3-27b-it"}),
        ("task=embeddings", {"BAAI/bge-m3"}),
        ("license=llama3.3", {"meta-llama/Llama-3.3-70B-Instruct"}),
        ("size=small&task=reasoning&gated=no&family=Qwen3", {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"}),
        ("size=large&gated=yes", {"meta-llama/Llama-3.3-70B-Instruct"}),
        ("format=gguf&family=DeepSeek+V3", set()),
        ("q=coder", {"Qwen/Qwen2.5-Coder-32B-Instruct"}),
    ],
)
def test_filters_narrow_the_marketplace(catalog, as_carol, query, expected):
    response = as_carol.get(f"/models/?{query}")
    assert set(card_names(response)) == expected
    if not expected:
        assert "No model matches your search." in text(response)


def test_a_bad_filter_value_is_reported_and_left_out(catalog, as_carol):
    response = as_carol.get("/models/?family=Nope&size=huge&task=embeddings")
    assert set(card_names(response)) == {"BAAI/bge-m3"}
    page = text(response)
    assert "Family: Select a valid choice. Nope is not one of the available choices." in page
    assert "Size: Select a valid choice. huge is not one of the available choices." in page


def test_a_search_that_matches_nothing_says_so(catalog, as_carol):
    assert "No model matches your search." in text(as_carol.get("/models/?q=nothing-matches"))


# --- a model's page --------------------------------------------------------------------------


def test_the_model_page_shows_facts_variants_and_memory_guidance_per_cluster(catalog, as_carol):
    factories.make_cluster("lab", gpus=2)
    model = Model.objects.get(repo_id="Qwen/Qwen3-8B")
    response = as_carol.get(f"/models/{model.pk}/")
    page = text(response)
    assert "Qwen3ForCausalLM" in page and "8.2 B / 8.2 B" in page
    assert "36 · 32 · 8 · 128" in page
    for name in ("bf16", "fp8", "awq-int4", "gguf-q4_k_m"):
        assert f'id="guidance-{model.variants.get(name=name).pk}"' in page
    bf16 = next(g for g in response.context["guidance"] if g.variant.name == "bf16")
    assert [e.context for e in bf16.estimates] == [4096, 32768, 40960]
    assert bf16.estimates[0].weights_bytes == 16381470720
    # 144 KiB per token, for the context and the pool's null block of 16 tokens
    assert bf16.estimates[1].kv_cache_bytes == (32768 + 16) * 147456
    (fit,) = bf16.fits
    assert (fit.cluster.name, fit.fit_empty) == ("lab", fit.fit_now)
    assert fit.size is not None and fit.fit_now >= 2
    assert "Fit checked at a context of 8,192 tokens" in page


def test_a_model_too_big_for_every_cluster_says_why(catalog, as_carol):
    factories.make_cluster("lab", gpus=1)
    model = Model.objects.get(repo_id="deepseek-ai/DeepSeek-V3")
    guidance = as_carol.get(f"/models/{model.pk}/").context["guidance"]
    fp8 = next(g for g in guidance if g.variant.name == "fp8")
    assert (fp8.fits[0].size, fp8.fits[0].fit_now, fp8.fits[0].fit_empty) == (None, 0, 0)
    assert fp8.fits[0].reason


def test_viewers_see_no_download_or_host_and_operators_do(catalog, as_carol, as_bob):
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    for_viewer = text(as_carol.get(f"/models/{model.pk}/"))
    assert "Download</button>" not in for_viewer and 'id="host-model"' not in for_viewer
    page = text(as_bob.get(f"/models/{model.pk}/"))
    assert "Download</button>" in page
    assert (
        f'href="/deployments/new/?model={model.pk}" role="button" id="host-model">Host</a>' in page
    )


# --- download (the view; the download itself is in test_downloads.py) ------------------------


def test_an_operator_asks_for_a_download_and_the_row_is_queued(catalog, as_bob, red):
    variant = Variant.objects.get(model__repo_id="Qwen/Qwen3-0.6B", name="bf16")
    response = as_bob.post(
        f"/models/{variant.model_id}/download/",
        {"variant": variant.pk, "revision": "v1.0", "team": red.pk},
    )
    assert response.status_code == 302 and response["Location"] == "/models/on-this-server/"
    row = ServerModel.objects.get(variant=variant)
    assert (row.state, row.requested_revision, row.team, row.requested_by.username) == (
        "queued",
        "v1.0",
        red,
        "bob",
    )


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d, blue, other: d.update(variant=other.pk), "variant: Select a valid choice."),
        (lambda d, blue, other: d.update(revision="bad rev!"), "revision: A revision is a branch"),
        (lambda d, blue, other: d.update(team=blue.pk), "team: Select a valid choice."),
        (lambda d, blue, other: d.update(variant="x"), "variant: Select a valid choice."),
    ],
)
def test_a_download_with_bad_values_is_refused_with_the_reason(
    catalog, as_bob, red, blue, change, message
):
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    other = Variant.objects.get(model__repo_id="Qwen/Qwen3-8B", name="bf16")
    data = {"variant": model.variants.get(name="bf16").pk, "revision": "", "team": red.pk}
    change(data, blue, other)
    response = as_bob.post(f"/models/{model.pk}/download/", data, follow=True)
    assert message in text(response)
    assert not ServerModel.objects.exists()


def test_viewers_and_outsiders_cannot_download(catalog, as_carol, as_dave):
    variant = Variant.objects.get(model__repo_id="Qwen/Qwen3-0.6B", name="bf16")
    for client in (as_carol, as_dave):
        url = f"/models/{variant.model_id}/download/"
        assert client.post(url, {"variant": variant.pk}).status_code == 403
    assert not ServerModel.objects.exists()


# --- adding a model by repository id ---------------------------------------------------------


def add(client, repo_id: str, **extra):
    return client.post("/models/add/", {"repo_id": repo_id, "revision": "", **extra})


def test_an_operator_adds_a_model_by_repository_id_with_facts_from_its_config(
    emulated_hub, as_bob, red
):
    repo = safetensors_repo("acme/Tiny-Qwen3", safetensors_total=600_000_000)
    repo.commits[0].files["Tiny-Q4_K_M.gguf"] = b"GGUF" + bytes(100)
    emulated_hub.add(repo)
    response = add(as_bob, "https://huggingface.co/acme/Tiny-Qwen3", team=red.pk)
    model = Model.objects.get(repo_id="acme/Tiny-Qwen3")
    assert response.status_code == 302 and response["Location"] == f"/models/{model.pk}/"
    catalog = json.loads(Path("catalog/data/models.json").read_text())["models"]
    qwen = next(m for m in catalog if m["repo_id"] == "Qwen/Qwen3-0.6B")
    assert {key: getattr(model, key) for key in FACTS} == {key: qwen[key] for key in FACTS}
    assert (model.params_total, model.license, model.gated) == (600_000_000, "apache-2.0", False)
    assert model.tasks == ["chat", "reasoning", "tool_calling"]
    assert model.added_by.username == "bob"
    variants = {v.name: v for v in model.variants.all()}
    assert set(variants) == {"bf16", "gguf-q4_k_m"}
    assert (variants["bf16"].engine, variants["bf16"].size_estimated) == ("vllm", False)
    assert variants["bf16"].size_bytes == len(repo.commits[0].files["model.safetensors"])
    assert (variants["gguf-q4_k_m"].engine, variants["gguf-q4_k_m"].format) == ("llamacpp", "gguf")


def test_a_gguf_repository_without_config_reads_its_base_models(emulated_hub, as_bob):
    emulated_hub.add(safetensors_repo("acme/Base"))
    emulated_hub.add(gguf_repo("acme/Base-GGUF", base_model="acme/Base"))
    assert add(as_bob, "acme/Base-GGUF").status_code == 302
    model = Model.objects.get(repo_id="acme/Base-GGUF")
    assert [v.name for v in model.variants.all()] == ["gguf-q4_k_m"]
    assert model.layers == 28 and "config.json of acme/Base" in model.source


def hub_problem_repos(emulated_hub) -> None:
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={TOKEN}))
    bin_only = {**config_files(), "pytorch_model.bin": b"\0" * 64}
    emulated_hub.add(Repo("acme/pickles", [Commit(bin_only)]))
    no_layers = upstream_config("Qwen/Qwen3-8B")
    no_layers.pop("num_hidden_layers")
    files = {"config.json": json.dumps(no_layers).encode(), "model.safetensors": b"x"}
    emulated_hub.add(Repo("acme/odd", [Commit(files)]))
    broken = {"config.json": b"{not json", "model.safetensors": safetensors_bytes(0.01)}
    emulated_hub.add(Repo("acme/broken", [Commit(broken)]))


@pytest.mark.parametrize(
    "repo_id,message",
    [
        ("acme/nothere", "acme/nothere was not found on Hugging Face: check the spelling"),
        ("acme/gated", "acme/gated is gated: its files need a Hugging Face token with access."),
        ("acme/pickles", "acme/pickles has no weights Berth can serve (found: README.md,"),
        ("acme/odd", "The config.json of acme/odd cannot be read: config.json has no num_hidden"),
        ("acme/broken", "config.json of acme/broken is not valid JSON"),
    ],
)
def test_a_repository_berth_cannot_add_gets_a_message_that_says_which_and_what_to_do(
    emulated_hub, as_bob, repo_id, message
):
    hub_problem_repos(emulated_hub)
    response = add(as_bob, repo_id)
    assert response.status_code == 400
    assert message in text(response)
    assert not Model.objects.exists()


def test_a_gated_repository_is_added_with_the_teams_token(emulated_hub, as_bob, red):
    hub_problem_repos(emulated_hub)
    red.set_hf_token(TOKEN)
    red.save()
    assert add(as_bob, "acme/gated", team=red.pk).status_code == 302
    assert Model.objects.get(repo_id="acme/gated").gated is True


@pytest.mark.parametrize(
    "data,message",
    [
        ({"repo_id": "no-slash"}, "Give the repository as owner/name, e.g. Qwen/Qwen3-8B."),
        ({"repo_id": "a/b/c"}, "Give the repository as owner/name"),
        ({"repo_id": "../etc"}, "Give the repository as owner/name"),
        ({"repo_id": ""}, "This field is required."),
        ({"repo_id": "acme/x", "revision": "bad rev"}, "A revision is a branch, tag or commit"),
        ({"repo_id": "acme/x", "team": "blue"}, "Select a valid choice."),
        ({"repo_id": "Qwen/Qwen3-8B"}, "Qwen/Qwen3-8B is already in the catalog."),
    ],
)
def test_the_add_form_refuses_bad_values(as_bob, blue, data, message):
    factories.make_model("Qwen/Qwen3-8B")
    if data.get("team") == "blue":
        data["team"] = blue.pk  # bob only views blue: its token is not his to use
    response = as_bob.post("/models/add/", {"revision": "", **data})
    assert response.status_code == 400
    assert message in text(response)
    assert Model.objects.count() == 1


def test_viewers_and_outsiders_cannot_add_models(as_carol, as_dave):
    for client in (as_carol, as_dave):
        assert client.get("/models/add/").status_code == 403
        assert add(client, "acme/x").status_code == 403


# --- adding a model from a path (admins) -----------------------------------------------------


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "Tiny-Qwen3"
    folder.mkdir()
    for name, content in config_files().items():
        (folder / name).write_bytes(content)
    (folder / "model.safetensors").write_bytes(safetensors_bytes(0.05))
    return folder


def test_an_admin_adds_a_model_from_a_path_and_its_files_are_on_this_server(as_alice, tmp_path):
    folder = model_folder(tmp_path)
    response = as_alice.post("/models/add-from-path/", {"path": str(folder), "repo_id": ""})
    model = Model.objects.get(repo_id="local/Tiny-Qwen3")
    assert response["Location"] == f"/models/{model.pk}/"
    (row,) = ServerModel.objects.filter(variant__model=model)
    assert (row.state, row.path, row.revision) == ("ready", str(folder), "local")
    assert "model.safetensors" in [f[0] for f in row.files]
    # Deleting forgets the row but never removes an admin's own files.
    page = text(as_alice.post(f"/models/on-this-server/{row.pk}/delete/", follow=True))
    assert f"its files under {folder} stay" in page
    assert (folder / "model.safetensors").exists() and not ServerModel.objects.exists()


@pytest.mark.parametrize(
    "path,message",
    [
        ("relative/path", "Give an absolute path, e.g. /srv/models/Qwen3-8B."),
        ("/nonexistent/berth-model", "/nonexistent/berth-model is not a directory on this server."),
        ("EMPTY", "has no config.json: Berth reads the model&#x27;s shape from it."),
        ("", "This field is required."),
    ],
)
def test_the_path_form_refuses_bad_values(as_alice, tmp_path, path, message):
    if path == "EMPTY":
        path = str(tmp_path)
    response = as_alice.post("/models/add-from-path/", {"path": path, "repo_id": ""})
    assert response.status_code == 400
    assert message in text(response)
    assert not Model.objects.exists()


def test_only_platform_admins_add_from_a_path(as_bob, tmp_path):
    folder = model_folder(tmp_path)
    assert as_bob.get("/models/add-from-path/").status_code == 403
    assert as_bob.post("/models/add-from-path/", {"path": str(folder)}).status_code == 403
    assert "From a path on this server" not in text(as_bob.get("/models/add/"))
    assert not Model.objects.exists()


# --- on this server --------------------------------------------------------------------------


def server_copy(state: str, **fields) -> ServerModel:
    model = Model.objects.first() or factories.make_model()
    return ServerModel.objects.create(variant=model.variants.first(), state=state, **fields)


def test_nothing_on_this_server_says_so(as_carol):
    assert "No models on this server yet." in text(as_carol.get("/models/on-this-server/"))


def test_a_running_download_is_followed_live_and_polled_only_as_a_fallback(as_carol):
    row = server_copy("downloading", size_bytes=4 * 2**30, progress_bytes=2**30, bytes_per_s=2**24)
    page = text(as_carol.get("/models/on-this-server/"))
    assert 'ws-connect="/ws/live/models/"' in page
    assert f'data-poll-url="/models/on-this-server/{row.pk}/row/"' in page
    assert "every 2s" not in page  # pushed over the socket; polled only while it is down
    partial = text(as_carol.get(f"/models/on-this-server/{row.pk}/row/"))
    assert partial.lstrip().startswith(f'<tr id="server-model-{row.pk}"')
    assert "25% · 1.00 GiB of 4.00 GiB · 16.0 MiB/s" in partial
    ServerModel.objects.filter(pk=row.pk).update(state="ready", progress_bytes=4 * 2**30)
    finished = text(as_carol.get(f"/models/on-this-server/{row.pk}/row/"))
    assert "data-poll-url" not in finished and "Ready" in finished


@pytest.mark.parametrize("state", ["failed", "must_redownload"])
def test_a_failed_download_shows_its_reason_and_operators_try_again(as_bob, as_carol, state):
    row = server_copy(state, error="acme/x was not found on Hugging Face")
    assert "acme/x was not found on Hugging Face" in text(as_carol.get("/models/on-this-server/"))
    assert "Try again" not in text(as_carol.get("/models/on-this-server/"))
    assert as_carol.post(f"/models/on-this-server/{row.pk}/try-again/").status_code == 403
    response = as_bob.post(f"/models/on-this-server/{row.pk}/try-again/", follow=True)
    assert f"Downloading {row.variant} again." in text(response)
    assert ServerModel.objects.get(pk=row.pk).state == "queued"
    again = text(as_bob.post(f"/models/on-this-server/{row.pk}/try-again/", follow=True))
    assert "Not done: Only a failed download or missing files can be tried again." in again


def test_only_admins_delete_files_and_never_while_a_deployment_uses_them(
    as_alice, as_bob, red, tmp_path, settings
):
    settings.MODELS_DIR = tmp_path
    folder = tmp_path / "acme" / "x"
    folder.mkdir(parents=True)
    row = server_copy("ready", path=str(folder))
    deployment = factories.make_deployment("red-x", red, model=row.variant.model)
    assert "Delete files" not in text(as_bob.get("/models/on-this-server/"))
    assert as_bob.post(f"/models/on-this-server/{row.pk}/delete/").status_code == 403
    refused = text(as_alice.post(f"/models/on-this-server/{row.pk}/delete/", follow=True))
    assert "Not deleted: Deployments use these files: red-x. Stop them first." in refused
    with state_change_allowed():
        Deployment.objects.filter(pk=deployment.pk).update(state="STOPPED")
    as_alice.post(f"/models/on-this-server/{row.pk}/delete/")
    assert not folder.exists() and not ServerModel.objects.exists()


# --- the team's Hugging Face token -----------------------------------------------------------


def test_the_token_is_write_only_in_the_admin_and_never_shown_in_a_page(
    as_alice, as_bob, red, catalog
):
    url = f"/admin/console/team/{red.pk}/change/"
    data = {
        "name": "red",
        "description": "",
        "hf_token": TOKEN,
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
    }
    assert as_alice.post(url, data).status_code == 302
    red = Team.objects.get(pk=red.pk)
    assert red.hf_token() == TOKEN and TOKEN not in red.hf_token_encrypted
    pages = [url, "/admin/console/team/", "/models/", "/models/on-this-server/", "/models/add/"]
    pages.append(f"/models/{Model.objects.first().pk}/")
    for page in pages:
        assert TOKEN not in text(as_alice.get(page)), page
    assert TOKEN not in text(as_bob.get("/api/v1/models"))
    kept = {**data, "hf_token": ""}  # an empty field keeps the stored token
    as_alice.post(url, kept)
    assert Team.objects.get(pk=red.pk).hf_token() == TOKEN
    as_alice.post(url, {**kept, "forget_hf_token": "on"})
    assert not Team.objects.get(pk=red.pk).has_hf_token


def test_a_malformed_token_is_refused_without_repeating_it(as_alice, red):
    url = f"/admin/console/team/{red.pk}/change/"
    bad = "hf_has a space"
    response = as_alice.post(
        url,
        {
            "name": "red",
            "hf_token": bad,
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    page = text(response)
    assert response.status_code == 200 and "That is not a Hugging Face token" in page
    assert bad not in page and not Team.objects.get(pk=red.pk).has_hf_token
