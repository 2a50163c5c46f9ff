"""Quotas from the API (GET/POST/DELETE /api/v1/quotas) and the model's own checks: who may set
which, and bad values refused in words naming the field."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from console.models import ApiKey
from gateway.models import Quota
from tests import factories

pytestmark = pytest.mark.django_db


def post(client, body: dict) -> object:
    return client.post("/api/v1/quotas", json.dumps(body), content_type="application/json")


def detail(response) -> str:
    return response.json()["detail"]


def test_an_operator_sets_a_team_quota_which_the_list_shows_with_its_use(as_bob, red):
    response = post(as_bob, {"team": "red", "tokens_per_day": 1000, "shadow": True})
    assert response.status_code == 201
    quota = Quota.objects.get(team=red)
    assert (quota.tokens_per_day, quota.requests_per_minute, quota.shadow) == (1000, None, True)
    listed = as_bob.get("/api/v1/quotas").json()["items"]
    assert listed == [
        {
            "id": quota.pk,
            "subject": "team red",
            "api_key": None,
            "team": "red",
            "deployment": None,
            "tokens_per_day": 1000,
            "tokens_per_month": None,
            "requests_per_minute": None,
            "tokens_per_minute": None,
            "shadow": True,
            "use": {"tokens_per_day": {"used": 0, "shadow_refusals": 0}},
        }
    ]


def test_setting_again_replaces_the_quota(as_bob, red):
    post(as_bob, {"team": "red", "tokens_per_day": 1000})
    assert post(as_bob, {"team": "red", "requests_per_minute": 5}).status_code == 201
    quota = Quota.objects.get(team=red)
    assert (quota.tokens_per_day, quota.requests_per_minute) == (None, 5)


def test_the_largest_limit_is_kept_for_every_limit(as_bob, red):
    """Each limit is stored as wide as it is checked (10**15): requests per minute too."""
    every = dict.fromkeys(Quota.LIMITS, 10**15)
    assert post(as_bob, {"team": "red", **every}).status_code == 201
    quota = Quota.objects.get(team=red)
    assert [getattr(quota, limit) for limit in Quota.LIMITS] == [10**15] * 4


def test_a_key_quota_on_the_callers_own_key_and_removing_it(as_bob, bob):
    key, _secret = ApiKey.issue(bob, "ci")
    response = post(as_bob, {"api_key": key.pk, "requests_per_minute": 3})
    assert response.status_code == 201
    assert response.json()["subject"] == 'API key "ci"'
    quota_id = response.json()["id"]
    assert as_bob.delete(f"/api/v1/quotas/{quota_id}").status_code == 204
    assert not Quota.objects.exists()


def test_a_viewer_may_not_set_a_team_quota(as_bob, blue):
    response = post(as_bob, {"team": "blue", "tokens_per_day": 10})
    assert response.status_code == 403
    assert detail(response) == "Only operators of team blue may set its quota."


def test_another_users_key_is_not_found(as_bob, carol):
    key, _secret = ApiKey.issue(carol, "hers")
    response = post(as_bob, {"api_key": key.pk, "tokens_per_day": 10})
    assert response.status_code == 404
    assert detail(response) == f"api_key: no key {key.pk} of yours; GET /api/v1/keys lists them."


def test_a_deployment_of_another_team_is_not_found(as_bob, red):
    green = factories.make_team("green")
    factories.make_deployment("green-qwen", green)
    response = post(as_bob, {"deployment": "green-qwen", "tokens_per_day": 10})
    assert response.status_code == 404
    assert detail(response) == "deployment: no deployment green-qwen in your teams."


def test_staff_set_a_quota_on_any_deployment(as_alice, red):
    factories.make_deployment("red-qwen", red)
    response = post(as_alice, {"deployment": "red-qwen", "tokens_per_minute": 500})
    assert response.status_code == 201
    assert response.json()["subject"] == "deployment red-qwen"


def test_a_negative_limit_is_refused_naming_the_field(as_bob, red):
    response = post(as_bob, {"team": "red", "tokens_per_day": -5})
    assert response.status_code == 422
    assert detail(response) == (
        "tokens_per_day: must be at least 1, not -5; leave it out for no limit"
    )
    assert not Quota.objects.exists()


def test_a_zero_limit_is_refused(as_bob, red):
    response = post(as_bob, {"team": "red", "requests_per_minute": 0})
    assert response.status_code == 422
    assert detail(response) == (
        "requests_per_minute: must be at least 1, not 0; leave it out for no limit"
    )


def test_a_quota_without_limits_is_refused(as_bob, red):
    response = post(as_bob, {"team": "red", "shadow": True})
    assert response.status_code == 422
    assert detail(response) == (
        "limits: set at least one of tokens_per_day, tokens_per_month, requests_per_minute, "
        "tokens_per_minute (each a whole number from 1)"
    )


def test_two_subjects_or_none_are_refused(as_bob, bob, red):
    key, _secret = ApiKey.issue(bob, "ci")
    both = post(as_bob, {"team": "red", "api_key": key.pk, "tokens_per_day": 10})
    assert both.status_code == 422
    assert detail(both) == (
        "subject: a quota names exactly one of api_key, team or deployment, not api_key and team"
    )
    neither = post(as_bob, {"tokens_per_day": 10})
    assert detail(neither) == (
        "subject: a quota names exactly one of api_key, team or deployment, not none"
    )


def test_the_model_refuses_a_zero_limit_and_two_subjects(bob, red):
    key, _secret = ApiKey.issue(bob, "ci")
    with pytest.raises(ValidationError) as zero:
        Quota(team=red, tokens_per_month=0).full_clean()
    assert zero.value.message_dict == {
        "tokens_per_month": ["must be at least 1, not 0; leave it out for no limit"]
    }
    with pytest.raises(ValidationError) as two:
        Quota(team=red, api_key=key, tokens_per_month=10).full_clean()
    assert two.value.message_dict == {
        "__all__": ["A quota names exactly one of an API key, a team or a deployment."]
    }
