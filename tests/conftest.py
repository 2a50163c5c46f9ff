"""The cast every test shares: alice the admin, bob an operator, carol a viewer, dave an outsider.

bob operates team "red" and only views team "blue"; carol views "red"; dave belongs to no team.
"""

from __future__ import annotations

import pytest
from django.test import Client

from console.models import Role
from tests import factories


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
