"""The cast every test shares: alice the admin, bob an operator, carol a viewer, dave an outsider.

bob operates team "red" and only views team "blue"; carol views "red"; dave belongs to no team.
"""

from __future__ import annotations

import time

import pytest
from django.db import OperationalError
from django.test import Client, testcases

from console.models import Role
from tests import factories

FLUSH_ATTEMPTS = 15


@pytest.fixture(scope="session", autouse=True)
def teardown_flush_survives_a_deadlock():
    """A transactional test's teardown truncates every table while the test's own server
    processes may still read them (the gateway re-reads its table every 0.2 s); PostgreSQL then
    may abort the TRUNCATE as a deadlock. The flush is tried again: the test had passed."""
    original = testcases.TransactionTestCase._fixture_teardown

    def teardown(self):  # type: ignore[no-untyped-def]
        # A loaded machine may lose several rounds in a row: up to about 10 s, waiting longer
        # each time, before the teardown gives up.
        for attempt in range(FLUSH_ATTEMPTS):
            try:
                return original(self)
            except OperationalError as error:
                if "deadlock detected" not in str(error) or attempt == FLUSH_ATTEMPTS - 1:
                    raise
                time.sleep(min(0.2 * (attempt + 1), 1.0))

    testcases.TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]
    yield
    testcases.TransactionTestCase._fixture_teardown = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Tests log in many times; the real hasher's cost is for attackers, not for tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def red(db):
    return factories.make_team("red")


@pytest.fixture
def blue(db):
    return factories.make_team("blue")


@pytest.fixture
def alice(db):
    return factories.make_user("alice", staff=True)


@pytest.fixture
def bob(red, blue):
    user = factories.make_user("bob")
    factories.add_member(user, red, Role.OPERATOR)
    factories.add_member(user, blue, Role.VIEWER)
    return user


@pytest.fixture
def carol(red):
    user = factories.make_user("carol")
    factories.add_member(user, red, Role.VIEWER)
    return user


@pytest.fixture
def dave(db):
    return factories.make_user("dave")


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def as_alice(alice) -> Client:
    return logged_in(alice)


@pytest.fixture
def as_bob(bob) -> Client:
    return logged_in(bob)


@pytest.fixture
def as_carol(carol) -> Client:
    return logged_in(carol)


@pytest.fixture
def as_dave(dave) -> Client:
    return logged_in(dave)


@pytest.fixture
def red_deployment(red):
    return factories.make_deployment("red-qwen", red)


@pytest.fixture
def blue_deployment(blue):
    return factories.make_deployment("blue-qwen", blue)
