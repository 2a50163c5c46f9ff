"""A model's own code runs only where a platform admin trusts it (per model and revision):
operators can ask but not switch it on, the editor says where it stands, the launcher adds
--trust-remote-code only then, and an upgrade keeps what ran trusted, recorded as such."""

from __future__ import annotations

import importlib
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command
from django.test import Client

from catalog import trust
from catalog.models import CodeTrust, Model
from console.models import ApiKey
from deployments import launching
from deployments.models import Deployment, Event
from tests import factories
from tests.integration.test_wizard import cluster_of, text

pytestmark = pytest.mark.django_db
upgrade = importlib.import_module("deployments.migrations.0007_settings_under_the_allow_list")


@pytest.fixture
def qwen(red) -> Deployment:
    call_command("load_catalog", stdout=StringIO())
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    deployment = factories.make_deployment("qwen", red, cluster=cluster_of("lab"), model=model)
    deployment.variant = model.variants.get(name="bf16")  # vLLM's (the GGUF is llama.cpp's)
    deployment.save(update_fields=["variant"])
    return deployment


def api(bob):
    return {"Authorization": f"Bearer {ApiKey.issue(bob, 'test')[1]}"}


def test_an_operator_cannot_switch_the_models_code_on(bob, qwen):
    answer = Client().post(
        f"/api/v1/deployments/{qwen.pk}/engine-settings",
        {"engine_settings": {"trust_remote_code": True}},
        content_type="application/json",
        headers=api(bob),
    )
    # Not one of the engine settings the OpenAPI document names: a 422, as the README says.
    assert answer.status_code == 422, answer.content
    assert "a platform admin decides whether a model's own code runs" in answer.json()["detail"]
    assert Deployment.objects.get(pk=qwen.pk).engine_settings == {}
    assert not CodeTrust.objects.exists()


def test_asking_records_the_request_and_the_editor_says_so(as_bob, bob, qwen):
    editor = f"/deployments/{qwen.pk}/settings/"
    page = text(as_bob.get(editor))
    assert "Qwen/Qwen3-0.6B's own code (the default revision) is not trusted" in page
    asked = as_bob.post(
        f"/models/{qwen.model.pk}/ask-code-trust/",
        {"code_revision": "", "code_trust_next": editor},
    )
    assert asked.status_code == 302 and asked["Location"] == editor
    row = CodeTrust.objects.get(model=qwen.model, revision="")
    assert (row.asked_by, row.trusted) == (bob, False)
    assert "bob asked a platform admin" in text(as_bob.get(editor))
    copy = factories.make_copy(qwen)
    assert "--trust-remote-code" not in launching.argv_for(
        copy, launching.launch_facts(copy, 8000, [])
    )


def test_asking_elsewhere_lands_on_the_models_page(as_bob, bob, qwen):
    asked = as_bob.post(
        f"/models/{qwen.model.pk}/ask-code-trust/", {"code_trust_next": "https://evil.example/"}
    )
    assert asked["Location"] == f"/models/{qwen.model.pk}/"


def test_a_viewer_cannot_ask(client, qwen):
    viewer = factories.make_user("vera")
    factories.add_member(viewer, qwen.team, "viewer")
    client.force_login(viewer)
    assert client.post(f"/models/{qwen.model.pk}/ask-code-trust/").status_code == 403
    assert not CodeTrust.objects.exists()


def test_an_admin_trusts_in_the_admin_and_copies_then_run_the_code(bob, qwen, client):
    admin = factories.make_user("ada")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    row = trust.ask(qwen.model, "", bob)
    copy = factories.make_copy(qwen)
    assert launching.spec_for(copy).cache_owner == ""  # the shared cache until it is trusted
    client.force_login(admin)
    answer = client.post(
        "/admin/catalog/codetrust/",
        {"action": "trust_code", "_selected_action": [row.pk]},
    )
    assert answer.status_code == 302
    row.refresh_from_db()
    assert (row.trusted_by, row.trusted) == (admin, True)
    facts = launching.launch_facts(copy, 8000, [])
    assert facts.trust_remote_code
    assert "--trust-remote-code" in launching.argv_for(copy, facts)
    # A model that runs its own code is cached per team on a cluster (it could rewrite files).
    assert launching.spec_for(copy).cache_owner == qwen.team.name
    # Per revision: another revision of the same model is not trusted by it.
    assert not trust.is_trusted(qwen.model, "v2")


def test_the_admin_offers_no_bulk_delete_of_trust_records(client, bob, qwen):
    trust.ask(qwen.model, "", bob)
    admin = factories.make_user("ada")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    page = client.get("/admin/catalog/codetrust/").content.decode()
    assert "trust_code" in page and "delete_selected" not in page


def test_only_a_platform_admin_can_trust(bob, qwen):
    with pytest.raises(PermissionError):
        trust.trust(qwen.model, "", bob)


def test_an_upgrade_keeps_what_ran_trusted_by_its_creator_and_marks_refused_settings(bob, qwen):
    Deployment.objects.filter(pk=qwen.pk).update(
        created_by=bob,
        engine_settings={"trust_remote_code": True, "other_flags": "--swap-space 4"},
    )
    upgrade.upgrade(apps, None)
    fresh = Deployment.objects.get(pk=qwen.pk)
    assert fresh.engine_settings == {"other_flags": "--swap-space 4"}
    row = CodeTrust.objects.get(model=qwen.model, revision="")
    assert row.trusted_by == bob and "Trusted on upgrade: bob had hosted qwen" in row.note
    assert fresh.notices == ["SettingsRefused"]
    event = Event.objects.get(deployment=fresh, kind="system")
    assert "‘--swap-space’ is not a flag of vLLM 0.32.0" in event.message
    copy = factories.make_copy(fresh)  # what ran with its own code still does, from the row
    assert launching.launch_facts(copy, 8000, []).trust_remote_code


def test_new_settings_clear_the_refused_notice(as_bob, bob, qwen):
    Deployment.objects.filter(pk=qwen.pk).update(notices=["SettingsRefused"])
    assert "flags Berth now refuses" in text(as_bob.get(f"/deployments/{qwen.pk}/"))
    answer = Client().post(
        f"/api/v1/deployments/{qwen.pk}/engine-settings",
        {"engine_settings": {"other_flags": "--seed 1"}},
        content_type="application/json",
        headers=api(bob),
    )
    assert answer.status_code == 202
    assert Deployment.objects.get(pk=qwen.pk).notices == []
