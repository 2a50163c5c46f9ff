"""The quotas on the keys page and the team page: shown where set, set from a small form,
bad values refused in words, removed by those who may."""

from __future__ import annotations

import pytest

from console.models import ApiKey
from gateway.models import Quota
from tests import factories

pytestmark = pytest.mark.django_db


def page_words(response) -> str:
    return response.content.decode()


def test_the_keys_page_sets_and_shows_a_quota_on_a_key(as_bob, bob):
    key, _secret = ApiKey.issue(bob, "notebook")
    answer = as_bob.post(
        "/quotas/set/",
        {"subject": f"api_key:{key.pk}", "requests_per_minute": "30", "next": "/account/api-keys/"},
        follow=True,
    )
    page = page_words(answer)
    assert "Quota set on API key &quot;notebook&quot;: 30 requests per minute." in page
    assert Quota.objects.get(api_key=key).requests_per_minute == 30
    assert "<td>30 requests per minute</td>" in page
    assert "<td>0 requests per minute</td>" in page  # used now


def test_the_team_page_sets_a_deployment_quota_for_an_operator(as_bob, red):
    factories.make_deployment("red-qwen", red)
    answer = as_bob.post(
        "/quotas/set/",
        {
            "subject": "deployment:red-qwen",
            "tokens_per_day": "5000",
            "shadow": "on",
            "next": "/teams/red/",
        },  # fmt: skip
        follow=True,
    )
    page = page_words(answer)
    assert "Quota set on deployment red-qwen: 5,000 tokens per day (shadow: counts only)." in page
    assert '<option value="deployment:red-qwen">deployment red-qwen</option>' in page
    assert "<td>0 tokens per day (0 would have been refused)</td>" in page


def test_a_negative_limit_from_the_form_is_refused_in_words(as_bob, red):
    answer = as_bob.post(
        "/quotas/set/",
        {"subject": "team:red", "tokens_per_day": "-5", "next": "/teams/red/"},
        follow=True,
    )
    assert (
        "The quota was not set: tokens_per_day: must be at least 1, not -5; "
        "leave it out for no limit"
    ) in page_words(answer)
    assert not Quota.objects.exists()


def test_a_viewer_sees_the_team_quota_but_no_form_nor_remove(as_carol, red):
    Quota.objects.create(team=red, tokens_per_month=1_000_000)
    page = page_words(as_carol.get("/teams/red/"))
    assert "<td>team red</td>" in page and "<td>1,000,000 tokens per month</td>" in page
    assert 'id="quota-form"' not in page and "Remove the quota" not in page


def test_an_operator_removes_the_team_quota(as_bob, red):
    quota = Quota.objects.create(team=red, tokens_per_month=100)
    answer = as_bob.post(f"/quotas/{quota.pk}/remove/", {"next": "/teams/red/"}, follow=True)
    assert "The quota on team red was removed." in page_words(answer)
    assert not Quota.objects.exists()
