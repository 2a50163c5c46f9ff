"""`berth quota set|ls|rm` against a running console (daphne on the test database), run as a
user runs it: its own process, the URL and key from the environment."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from console.models import ApiKey
from gateway.models import Quota
from tests.integration.conftest import Console
from tests.integration.test_cli import run
from tests.processes import console_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def console_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    with django_db_blocker.unblock(), console_server() as url:
        yield url


@pytest.fixture
def console(console_url, bob) -> Console:
    return Console(console_url, ApiKey.issue(bob, "cli")[1], "")


def test_set_list_and_remove_a_team_quota(console, red):
    made = run(console, "quota", "set", "--team", "red", "--tokens-per-day", "1000",
               "--requests-per-minute", "30")  # fmt: skip
    assert made.returncode == 0, made.stderr
    quota = Quota.objects.get(team=red)
    assert made.stdout == (
        f"Quota {quota.pk} set on team red: 1,000 tokens/day, 30 requests/min.\n"
    )
    listed = run(console, "quota", "ls", "--output", "json")
    assert [(q["subject"], q["tokens_per_day"], q["use"]) for q in json.loads(listed.stdout)] == [
        (
            "team red",
            1000,
            {
                "tokens_per_day": {"used": 0, "shadow_refusals": 0},
                "requests_per_minute": {"used": 0, "shadow_refusals": 0},
            },
        )
    ]
    removed = run(console, "quota", "rm", str(quota.pk))
    assert (removed.returncode, removed.stdout) == (0, f"Quota {quota.pk} removed.\n")
    assert not Quota.objects.exists()


def test_a_negative_limit_is_refused_in_words_and_exits_1(console, red):
    refused = run(console, "quota", "set", "--team", "red", "--tokens-per-minute", "-5")
    assert refused.returncode == 1
    assert "tokens_per_minute: must be at least 1, not -5; leave it out for no limit" in (
        refused.stderr
    )
    assert not Quota.objects.exists()


def test_two_subjects_are_refused_in_words(console, red):
    refused = run(console, "quota", "set", "--team", "red", "--deployment", "red-qwen",
                  "--tokens-per-day", "10")  # fmt: skip
    assert refused.returncode == 1
    assert (
        "subject: a quota names exactly one of api_key, team or deployment, not team and deployment"
    ) in refused.stderr
