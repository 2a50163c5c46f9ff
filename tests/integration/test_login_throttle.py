"""Failed logins are throttled: five failures for one user from one address refuse that pair for
15 minutes, saying until when; the same user from another address still logs in, and failures
from many addresses only slow answers down (nobody can lock `admin` out). The admin's login page
is guarded the same way, and passwords must pass Django's stronger validators."""

from __future__ import annotations

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client

from console import logins
from tests import factories

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-and-unusual-passphrase"


@pytest.fixture
def dora(db):
    user = factories.make_user("dora")
    user.set_password(PASSWORD)
    user.is_staff = True
    user.save()
    return user


def log_in(path: str, password: str, address: str) -> int:
    answer = Client().post(path, {"username": "dora", "password": password}, REMOTE_ADDR=address)
    return answer.status_code


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_five_failures_from_one_address_lock_that_address_out_for_the_user(dora, path):
    for _ in range(4):
        assert log_in(path, "wrong", "10.0.0.1") == 200  # the form again, with its error
    assert log_in(path, "wrong", "10.0.0.1") == 429  # the fifth: locked out from here on
    refused = Client().post(
        path, {"username": "dora", "password": PASSWORD}, REMOTE_ADDR="10.0.0.1"
    )
    assert refused.status_code == 429  # even the right password, from there, for now
    words = refused.content.decode()
    assert "Too many failed logins for “dora” from your address" in words
    assert "refused for 15 minutes. Try again after " in words
    assert log_in(path, PASSWORD, "10.0.0.2") == 302  # from elsewhere: logged in


def test_failures_from_many_addresses_never_lock_the_user_out_only_slow_it(dora):
    for number in range(8):
        assert log_in("/login/", "guess", f"192.0.2.{number}") == 200
    assert logins.recent_failures("dora") == 8
    assert logins.delay_for(logins.recent_failures("dora")) == pytest.approx(0.75)
    assert logins.delay_for(50) == logins.MAX_DELAY_S
    assert logins.delay_for(5) == 0  # within the limit, nothing is slowed
    assert log_in("/login/", PASSWORD, "192.0.2.200") == 302


@pytest.mark.parametrize(
    "password,words",
    [
        ("short-one", "too short. It must contain at least 12 characters"),
        ("123456789012345", "entirely numeric"),
        ("password12345", "too common"),
        ("dora12", "too similar to the username"),
    ],
)
def test_passwords_must_pass_the_stronger_validators(dora, password, words):
    with pytest.raises(ValidationError, match=words):
        validate_password(password, dora)
