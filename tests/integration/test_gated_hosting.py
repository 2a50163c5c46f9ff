"""A gated model is hosted by a team only when its own Hugging Face token may read it (asked of
the emulated hub, remembered per team and model); another team's download does not grant it."""

from __future__ import annotations

import pytest

from catalog.models import GatedAccess, Model
from deployments import actions
from deployments.models import Deployment
from tests import factories
from tests.hub import safetensors_repo
from tests.integration.test_downloads import TOKEN, download, emulated_hub, models_dir, variant_of

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["emulated_hub", "models_dir"]  # fixtures, used by name


def host(team, actor, variant, name):
    return actions.host(
        actor,
        actions.HostRequest(
            team=team, model=variant.model, variant=variant, cluster=factories.make_cluster(name),
            name=name,
        ),
    )  # fmt: skip


def test_another_teams_download_does_not_let_a_team_host_a_gated_model(
    emulated_hub, models_dir, bob, red, blue
):
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={TOKEN}))
    variant = variant_of("acme/gated")
    Model.objects.filter(pk=variant.model_id).update(gated=True)
    variant.model.refresh_from_db()
    red.set_hf_token(TOKEN)
    red.save()
    assert download(variant, "", red, bob).state == "ready"  # with red's token
    carol = factories.make_user("carol")
    factories.add_member(carol, blue, "operator")

    with pytest.raises(actions.ActionRefused) as refused:
        host(blue, carol, variant, "blue-gated")
    assert refused.value.field == "model"
    assert str(refused.value).startswith(
        "acme/gated is gated: its files need a Hugging Face token with access. Ask a platform "
        "admin to set the Hugging Face token of team blue"
    )
    assert not Deployment.objects.filter(name="blue-gated").exists()

    assert host(red, bob, variant, "red-gated").team == red
    assert GatedAccess.objects.filter(team=red, model=variant.model).exists()
    asked = len(emulated_hub.requests)
    host(red, bob, variant, "red-again")  # remembered: the hub is not asked again
    assert len(emulated_hub.requests) == asked


def test_a_blue_token_without_access_is_refused_in_words(emulated_hub, models_dir, bob, blue):
    emulated_hub.add(safetensors_repo("acme/gated", gated=True, allowed_tokens={TOKEN}))
    emulated_hub.known_tokens.add("hf_bluetoken1234567890")
    variant = variant_of("acme/gated")
    Model.objects.filter(pk=variant.model_id).update(gated=True)
    variant.model.refresh_from_db()
    blue.set_hf_token("hf_bluetoken1234567890")
    blue.save()
    carol = factories.make_user("carol")
    factories.add_member(carol, blue, "operator")
    with pytest.raises(actions.ActionRefused, match="token of team blue has no access to it"):
        host(blue, carol, variant, "blue-gated")
