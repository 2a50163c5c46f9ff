"""Actions outside a deployment's own events write one audit row each: who, what, on what."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from catalog import adding, downloads, trust
from catalog.models import ServerModel
from console.models import ApiKey, AuditEntry
from deployments import actions
from tests import factories

pytestmark = pytest.mark.django_db


def only_entry() -> AuditEntry:
    (entry,) = AuditEntry.objects.all()
    return entry


def test_issuing_and_revoking_a_key_on_the_keys_page_are_audited(as_bob, bob):
    as_bob.post("/account/api-keys/", {"name": "laptop"})
    issued = only_entry()
    assert (issued.actor, issued.action, issued.target) == (
        bob,
        "api_key.issued",
        "API key “laptop” of bob",
    )
    key = ApiKey.objects.get(user=bob)
    as_bob.post(f"/account/api-keys/{key.pk}/revoke/")
    revoked = AuditEntry.objects.get(action="api_key.revoked")
    assert revoked.actor == bob and key.prefix not in revoked.target


def test_a_key_from_the_command_line_is_audited_by_its_name(bob):
    call_command("createapikey", "bob", stdout=io.StringIO())
    entry = only_entry()
    assert (entry.actor, entry.actor_name, entry.action) == (
        None,
        "manage.py createapikey",
        "api_key.issued",
    )


def test_downloads_and_file_deletions_are_audited_with_the_team(bob, red, tmp_path, settings):
    settings.MODELS_DIR = tmp_path / "models"
    model = factories.make_model("acme/small")
    row = downloads.request_download(model.variants.get(), "", red, bob)
    asked = only_entry()
    assert (asked.action, asked.team, asked.actor) == ("download.requested", red, bob)
    ServerModel.objects.filter(pk=row.pk).update(state="failed")
    downloads.try_again(ServerModel.objects.get(pk=row.pk), bob)
    assert AuditEntry.objects.filter(action="download.retried", team=red).exists()
    ServerModel.objects.filter(pk=row.pk).update(state="ready")
    words = actions.delete_server_files(bob, ServerModel.objects.get(pk=row.pk)).words
    deleted = AuditEntry.objects.get(action="files.deleted")
    assert deleted.message == words and deleted.actor == bob


def test_adding_a_model_from_a_path_and_trusting_its_code_are_audited(bob, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
        "torch_dtype": "float32",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"x" * 100)
    model = adding.add_from_path(str(folder), "local/m", bob)
    assert only_entry().action == "model.added" and only_entry().target == "local/m"
    admin = factories.make_user("ada")
    admin.is_staff = True
    admin.save()
    trust.ask(model, "", bob)
    trust.trust(model, "", admin, "reviewed")
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "actor_name"))
    assert actions[-2:] == [("code.trust_asked", "bob"), ("code.trusted", "ada")]
