"""A gated model is hosted by a team only when its own Hugging Face token may read it (asked of
the emulated hub, remembered per team and model); another team's download does not grant it."""

from __future__ import annotations

import pytest

from catalog.models import GatedAccess, Model
from deployments import actions
from deployments.choices import DeploymentState, ErrorCode
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


def test_a_request_that_can_never_fit_is_refused_as_no_fit_before_the_offline_hub_is_asked(
    monkeypatch, bob, red
):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the hub is offline
    model = factories.make_model("acme/gated")  # 8 B parameters, 15.26 GiB of bf16 weights
    Model.objects.filter(pk=model.pk).update(gated=True)
    model.refresh_from_db()
    variant = model.variants.get()
    cluster = factories.make_cluster("small")

    def host_sized(name, size):
        return actions.host(
            bob,
            actions.HostRequest(
                team=red, model=model, variant=variant, cluster=cluster, name=name,
                accelerators_per_copy=size,
            ),
        )  # fmt: skip

    # A quarter of an 80 GB GPU holds the weights but not their 40,960 tokens of context.
    never = host_sized("quarter", "0.25")
    assert never.state == DeploymentState.FAILED
    assert never.last_error_code == ErrorCode.NO_FIT
    assert never.last_message.startswith("Does not fit, even on the empty cluster: ")

    # One that could fit asks the hub, which cannot answer: refused, saying so.
    with pytest.raises(actions.ActionRefused) as refused:
        host_sized("whole", "1")
    assert refused.value.field == "model"
    assert str(refused.value).startswith(
        "acme/gated is gated, and Berth could not ask Hugging Face whether team red may use it: "
    )
    assert list(Deployment.objects.values_list("name", flat=True)) == ["quarter"]
