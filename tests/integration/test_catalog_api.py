"""The catalog's API: a model by id or by repository id, adding one from the (emulated) Hugging
Face hub, downloading a variant and trying a failed download again, with the console's roles,
its refusals as JSON naming the field, and nothing written when it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from catalog.api import REPO_ID
from catalog.models import Model, ServerModel
from console.models import ApiKey, AuditEntry, KeyScope
from deployments.models import Deployment
from tests import factories
from tests.hub import running_hub, safetensors_repo

pytestmark = pytest.mark.django_db

API = "/api/v1"
TOKEN = "hf_catalogapitoken1234567890"


class Caller:
    """An API client acting with one of the user's API keys."""

    def __init__(self, user: Any, scope: str = KeyScope.OPERATE) -> None:
        _key, secret = ApiKey.issue(user, "test", scope=scope)
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {secret}"}

    def get(self, path: str) -> Any:
        return self.client.get(API + path, headers=self.headers)

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(
            API + path, body, content_type="application/json", headers=self.headers
        )


@pytest.fixture
def emulated_hub(monkeypatch):
    with running_hub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def qwen(db) -> Model:
    return factories.make_model("Qwen/Qwen3-8B")


def server_copy(model: Model, state: str, **fields: Any) -> ServerModel:
    return ServerModel.objects.create(variant=model.variants.get(), state=state, **fields)


def actions() -> list[str]:
    return list(AuditEntry.objects.order_by("pk").values_list("action", flat=True))


# --- reading ---------------------------------------------------------------------------------


def test_a_model_is_shown_by_id_with_its_variants_and_their_download(qwen, carol):
    server_copy(qwen, "downloading", size_bytes=4 * 2**30, progress_bytes=2**30)
    response = Caller(carol).get(f"/models/{qwen.pk}")
    assert response.status_code == 200
    shown = response.json()
    assert (shown["id"], shown["repo_id"], shown["max_context"]) == (
        qwen.pk,
        "Qwen/Qwen3-8B",
        40960,
    )
    (bf16,) = shown["variants"]
    assert (bf16["name"], bf16["on_this_server"]) == ("bf16", False)
    assert bf16["download"] == {
        "state": "downloading",
        "revision": "",
        "progress_gb": 1.0,
        "size_gb": 4.0,
        "error": "",
    }
    listed = Caller(carol).get("/models").json()["items"]
    assert listed == [shown]


def test_a_variant_never_downloaded_has_no_download(qwen, carol):
    (bf16,) = Caller(carol).get(f"/models/{qwen.pk}").json()["variants"]
    assert bf16["download"] is None and bf16["on_this_server"] is False


def test_an_unknown_model_id_is_a_json_404_in_words(qwen, carol):
    response = Caller(carol).get(f"/models/{qwen.pk + 1}")
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"No model {qwen.pk + 1} in the catalog; GET /api/v1/models lists them.",
        "field": "",
    }


def test_the_list_finds_a_model_by_its_exact_repository_id(qwen, carol):
    factories.make_model("Qwen/Qwen3-8B-FP8")
    caller = Caller(carol)
    found = caller.get("/models?repo_id=Qwen/Qwen3-8B").json()
    assert [m["repo_id"] for m in found["items"]] == ["Qwen/Qwen3-8B"]
    assert found["items"][0]["id"] == qwen.pk
    assert caller.get("/models?repo_id=Qwen/Qwen3").json() == {"items": [], "next_cursor": None}
    assert caller.get("/models?repo_id=nobody/has-this").json()["items"] == []


def test_a_repository_id_filter_too_long_is_refused_naming_it(qwen, carol):
    response = Caller(carol).get("/models?repo_id=" + "a" * 201)
    assert response.status_code == 400
    assert response.json() == {
        "detail": "repo_id: Ensure this value has at most 200 characters (it has 201).",
        "field": "repo_id",
    }


# --- adding a model --------------------------------------------------------------------------


def test_an_operator_adds_a_model_from_the_hub_and_gets_it_with_201(emulated_hub, bob, red):
    emulated_hub.add(safetensors_repo("acme/Tiny-Qwen3"))
    response = Caller(bob).post("/models", {"repo_id": "acme/Tiny-Qwen3", "team": "red"})
    assert response.status_code == 201, response.content
    model = Model.objects.get(repo_id="acme/Tiny-Qwen3")
    added = response.json()
    assert (added["id"], added["name"], added["license"]) == (model.pk, "Tiny-Qwen3", "apache-2.0")
    assert [v["name"] for v in added["variants"]] == ["bf16"]
    assert added["variants"][0]["download"] is None
    assert model.added_by == bob
    entry = AuditEntry.objects.get(action="model.added")
    assert (entry.actor, entry.target) == (bob, "acme/Tiny-Qwen3")


def test_a_gated_repository_is_added_with_the_named_teams_token(emulated_hub, bob, red):
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={TOKEN}))
    red.set_hf_token(TOKEN)
    red.save()
    refused = Caller(bob).post("/models", {"repo_id": "acme/gated"})
    assert refused.status_code == 400
    assert refused.json()["field"] == "team"
    assert refused.json()["detail"].startswith(
        "team: acme/gated is gated: its files need a Hugging Face token with access."
    )
    assert not Model.objects.exists()
    added = Caller(bob).post("/models", {"repo_id": "acme/gated", "team": "red"})
    assert added.status_code == 201 and added.json()["gated"] is True


def test_a_repository_the_hub_does_not_have_is_refused_and_nothing_is_added(emulated_hub, bob):
    response = Caller(bob).post("/models", {"repo_id": "acme/nothere", "revision": "v1"})
    assert response.status_code == 400
    assert response.json()["field"] == "repo_id"
    assert response.json()["detail"].startswith(
        "repo_id: acme/nothere was not found on Hugging Face: check the spelling"
    )
    assert not Model.objects.exists() and not AuditEntry.objects.exists()


def test_a_model_already_in_the_catalog_is_refused(qwen, bob):
    response = Caller(bob).post("/models", {"repo_id": "qwen/qwen3-8b"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "repo_id: qwen/qwen3-8b is already in the catalog.",
        "field": "repo_id",
    }
    assert Model.objects.count() == 1


@pytest.mark.parametrize(
    "body,detail",
    [
        ({"repo_id": ""}, "repo_id: String should have at least 3 characters"),
        ({"repo_id": "a/" + "b" * 199}, "repo_id: String should have at most 200 characters"),
        ({"repo_id": "no-slash"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "a/b/c"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "../etc"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "a/b\n"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "a/b\x00"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "acmé/x"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "a--b/x"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        ({"repo_id": "acme/x-"}, "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
        (
            {"repo_id": "acme/x.git"},
            "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B",
        ),
        (
            {"repo_id": "a" * 97 + "/b"},
            "repo_id: give the repository as owner/name, e.g. Qwen/Qwen3-8B",
        ),
        ({}, "repo_id: Field required"),
        (
            {"repo_id": "acme/x", "revision": "bad rev"},
            "revision: a revision is a branch, tag or commit: letters, digits, . _ - and /",
        ),
        ({"repo_id": "acme/x", "team": ""}, "team: String should have at least 1 character"),
        ({"repo_id": "acme/x", "colour": "red"}, "colour: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_add_is_422_naming_the_field(bob, body, detail):
    response = Caller(bob).post("/models", body)
    assert response.status_code == 422
    assert response.json()["detail"] == detail
    assert response.json()["field"] == detail.split(":")[0]
    assert not Model.objects.exists()


def test_adding_with_a_team_one_only_views_is_refused_naming_the_team(emulated_hub, bob, blue):
    emulated_hub.add(safetensors_repo("acme/Tiny-Qwen3"))
    response = Caller(bob).post("/models", {"repo_id": "acme/Tiny-Qwen3", "team": "blue"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "team: blue is not a team you operate; you operate red",
        "field": "team",
    }
    assert not Model.objects.exists()


# --- who may change the catalog --------------------------------------------------------------


def writes(model: Model) -> list[tuple[str, dict[str, str]]]:
    return [
        ("/models", {"repo_id": "acme/Tiny-Qwen3"}),
        (f"/models/{model.pk}/download", {"variant": "bf16"}),
        (f"/models/{model.pk}/retry", {"variant": "bf16"}),
    ]


def test_viewers_and_outsiders_read_but_change_nothing(emulated_hub, qwen, carol, dave):
    emulated_hub.add(safetensors_repo("acme/Tiny-Qwen3"))
    row = server_copy(qwen, "failed", error="gone")
    for user in (carol, dave):
        caller = Caller(user)
        assert caller.get(f"/models/{qwen.pk}").status_code == 200
        for path, body in writes(qwen):
            response = caller.post(path, body)
            assert response.status_code == 403, path
            assert response.json() == {"detail": "Only operators may do this.", "field": ""}
    assert list(Model.objects.values_list("repo_id", flat=True)) == ["Qwen/Qwen3-8B"]
    assert ServerModel.objects.get().state == row.state == "failed"
    assert not AuditEntry.objects.filter(action__startswith=("download")).exists()


def test_a_read_only_key_of_an_operator_changes_nothing(emulated_hub, qwen, bob):
    emulated_hub.add(safetensors_repo("acme/Tiny-Qwen3"))
    server_copy(qwen, "failed", error="gone")
    caller = Caller(bob, scope=KeyScope.READ)
    assert caller.get("/models").status_code == 200
    for path, body in writes(qwen):
        response = caller.post(path, body)
        assert response.status_code == 403, path
        assert "This API key's scope is read" in response.json()["detail"]
    assert Model.objects.count() == 1 and ServerModel.objects.get().state == "failed"


def test_without_a_key_every_catalog_call_is_401(qwen):
    client = Client()
    assert client.get(f"{API}/models").status_code == 401
    assert client.get(f"{API}/models/{qwen.pk}").status_code == 401
    for path, body in writes(qwen):
        response = client.post(API + path, body, content_type="application/json")
        assert response.status_code == 401
        assert "Authentication required" in response.json()["detail"]
    assert Model.objects.count() == 1 and not ServerModel.objects.exists()


# --- downloading -----------------------------------------------------------------------------


def test_an_operator_downloads_a_variant_and_gets_the_model_with_202(qwen, bob, red):
    body = {"variant": "bf16", "revision": "v1.0", "team": "red"}
    response = Caller(bob).post(f"/models/{qwen.pk}/download", body)
    assert response.status_code == 202, response.content
    (bf16,) = response.json()["variants"]
    assert bf16["download"]["state"] == "queued" and bf16["download"]["revision"] == "v1.0"
    row = ServerModel.objects.get()
    assert (row.state, row.requested_revision, row.team, row.requested_by) == (
        "queued",
        "v1.0",
        red,
        bob,
    )
    assert actions() == ["download.requested"]


def test_a_variant_already_here_comes_back_as_it_is(qwen, bob):
    row = server_copy(qwen, "ready", size_bytes=2**30, progress_bytes=2**30)
    response = Caller(bob).post(f"/models/{qwen.pk}/download", {"variant": "bf16"})
    assert response.status_code == 202
    (bf16,) = response.json()["variants"]
    assert bf16["on_this_server"] is True and bf16["download"]["state"] == "ready"
    assert list(ServerModel.objects.values_list("pk", "state")) == [(row.pk, "ready")]
    assert actions() == []


def test_downloading_an_unknown_variant_is_404_naming_it(qwen, bob):
    response = Caller(bob).post(f"/models/{qwen.pk}/download", {"variant": "fp8"})
    assert response.status_code == 404
    assert response.json() == {
        "detail": "variant: Qwen/Qwen3-8B has no variant fp8; its variants: bf16",
        "field": "variant",
    }
    assert not ServerModel.objects.exists()


@pytest.mark.parametrize(
    "body,status,detail",
    [
        ({"variant": "bf16", "team": "blue"}, 400, "team: blue is not a team you operate;"),
        ({"variant": "bf16", "team": "nope"}, 400, "team: nope is not a team you operate;"),
        ({"variant": "bf16", "team": "r\x00d"}, 400, "team: r\x00d is not a team you operate;"),
        ({"variant": "bf\x0016"}, 404, "variant: Qwen/Qwen3-8B has no variant bf\x0016;"),
        ({"variant": ""}, 422, "variant: String should have at least 1 character"),
        ({"variant": "b" * 41}, 422, "variant: String should have at most 40 characters"),
        ({"variant": "bf16", "revision": "a..b"}, 422, "revision: a revision is a branch"),
        ({"variant": 16}, 422, "variant: Input should be a valid string"),
        ({}, 422, "variant: Field required"),
    ],
)
def test_a_bad_download_is_refused_naming_the_field(qwen, bob, body, status, detail):
    response = Caller(bob).post(f"/models/{qwen.pk}/download", body)
    assert response.status_code == status
    assert response.json()["detail"].startswith(detail)
    assert response.json()["field"] == detail.split(":")[0]
    assert not ServerModel.objects.exists() and not AuditEntry.objects.exists()


def test_downloading_a_variant_of_an_unknown_model_is_404(qwen, bob):
    response = Caller(bob).post(f"/models/{qwen.pk + 1}/download", {"variant": "bf16"})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        f"No model {qwen.pk + 1} in the catalog; GET /api/v1/models lists them."
    )


# --- trying a failed download again ----------------------------------------------------------


@pytest.mark.parametrize("state", ["failed", "must_redownload"])
def test_an_operator_tries_a_failed_download_again(qwen, bob, state):
    row = server_copy(qwen, state, error="acme/x was not found on Hugging Face")
    response = Caller(bob).post(f"/models/{qwen.pk}/retry", {"variant": "bf16"})
    assert response.status_code == 202, response.content
    (bf16,) = response.json()["variants"]
    assert bf16["download"]["state"] == "queued" and bf16["download"]["error"] == ""
    row.refresh_from_db()
    assert (row.state, row.requested_by) == ("queued", bob)
    assert actions() == ["download.retried"]


@pytest.mark.parametrize("state", ["queued", "downloading", "ready", None])
def test_a_variant_with_no_failed_download_has_nothing_to_try_again(qwen, bob, state):
    if state:
        server_copy(qwen, state)
    response = Caller(bob).post(f"/models/{qwen.pk}/retry", {"variant": "bf16"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "variant: Qwen/Qwen3-8B bf16 has nothing to try again: only a failed "
        "download or missing files can be tried again.",
        "field": "variant",
    }
    assert list(ServerModel.objects.values_list("state", flat=True)) == ([state] if state else [])
    assert actions() == []


def test_trying_an_unknown_variant_again_is_404_naming_it(qwen, bob):
    server_copy(qwen, "failed")
    response = Caller(bob).post(f"/models/{qwen.pk}/retry", {"variant": "q4"})
    assert response.status_code == 404
    assert response.json()["field"] == "variant"
    assert response.json()["detail"] == (
        "variant: Qwen/Qwen3-8B has no variant q4; its variants: bf16"
    )
    assert ServerModel.objects.get().state == "failed"


# --- the OpenAPI document --------------------------------------------------------------------


def test_the_openapi_document_states_each_inputs_constraints(as_bob):
    document = as_bob.get(f"{API}/openapi.json").json()
    paths = document["paths"]
    assert {
        "/api/v1/models/{id}",
        "/api/v1/models/{id}/download",
        "/api/v1/models/{id}/retry",
    } <= set(paths)
    assert set(paths["/api/v1/models"]) == {"get", "post"}
    schemas = document["components"]["schemas"]
    add = schemas["AddModelIn"]
    assert add["required"] == ["repo_id"] and add["additionalProperties"] is False
    repo_id = add["properties"]["repo_id"]
    assert (repo_id["minLength"], repo_id["maxLength"]) == (3, 200)
    assert repo_id["pattern"] == REPO_ID and "(?!.*--)" in REPO_ID
    assert schemas["DownloadIn"]["required"] == ["variant"]
    assert schemas["DownloadIn"]["properties"]["revision"]["maxLength"] == 100
    assert schemas["RetryIn"]["properties"]["variant"]["maxLength"] == 40
    operations = {op["operationId"] for path in paths.values() for op in path.values()}
    assert {"show_model", "add_model", "download", "retry"} <= operations


# --- deleting a variant's files --------------------------------------------------------------


def test_a_platform_admin_deletes_a_variants_files_and_they_are_gone(
    qwen, alice, settings, tmp_path
):
    settings.MODELS_DIR = tmp_path
    folder = tmp_path / "qwen-bf16"
    (folder / "model.safetensors").parent.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    server_copy(qwen, "ready", path=str(folder))
    response = Caller(alice).post(f"/models/{qwen.pk}/delete-files", {"variant": "bf16"})
    assert response.status_code == 200, response.content
    (bf16,) = response.json()["variants"]
    assert bf16["on_this_server"] is False and bf16["download"] is None
    assert not folder.exists() and not ServerModel.objects.exists()
    assert actions() == ["files.deleted"]


def test_files_a_deployment_uses_are_not_deleted_and_it_is_named(qwen, alice, red):
    row = server_copy(qwen, "ready", path="/models/qwen")
    deployment = factories.make_deployment("uses-qwen", red)
    Deployment.objects.filter(pk=deployment.pk).update(model=qwen, variant=row.variant)
    response = Caller(alice).post(f"/models/{qwen.pk}/delete-files", {"variant": "bf16"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "variant: Deployments use these files: uses-qwen. Stop them first.",
        "field": "variant",
    }
    assert ServerModel.objects.filter(pk=row.pk).exists() and actions() == []


@pytest.mark.parametrize(
    "who,variant,status,words",
    [
        ("bob", "bf16", 403, "Only platform admins may do this."),
        ("alice", "q4", 404, "Qwen/Qwen3-8B has no variant q4"),
        ("alice", "", 422, "variant"),
    ],
)
def test_deleting_files_is_for_platform_admins_and_an_unknown_variant_is_named(
    qwen, alice, bob, who, variant, status, words
):
    server_copy(qwen, "ready", path="/models/qwen")
    caller = Caller(alice if who == "alice" else bob)
    response = caller.post(f"/models/{qwen.pk}/delete-files", {"variant": variant})
    assert response.status_code == status, response.content
    assert words in response.json()["detail"]
    assert ServerModel.objects.count() == 1 and actions() == []


def test_a_variant_with_no_files_here_has_nothing_to_delete(qwen, alice):
    response = Caller(alice).post(f"/models/{qwen.pk}/delete-files", {"variant": "bf16"})
    assert response.status_code == 400
    assert "has no files on this server to delete" in response.json()["detail"]
