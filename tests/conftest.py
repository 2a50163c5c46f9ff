"""The cast every test shares: alice the admin, bob an operator, carol a viewer, dave an outsider.

bob operates team "red" and only views team "blue"; carol views "red"; dave belongs to no team.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator

import pytest
from django.core.management.base import CommandError
from django.db import OperationalError
from django.test import Client, testcases

from console.env import TEST_WORKER
from console.models import Role
from tests import factories

FLUSH_ATTEMPTS = 15

# The tests that start a Ray cluster or a real engine run one after another on one worker of a
# parallel run (make test runs two): two of them at once would share this machine's two cores.
ONE_AT_A_TIME = {
    "tests/integration/test_ray_clusters.py",
    "tests/integration/test_ray_copies.py",
    "tests/integration/test_ray_token.py",
    "tests/integration/test_ray_real_engine.py",
    "tests/conformance/test_vllm.py",
    "tests/conformance/test_llama_cpp.py",
    "tests/e2e/test_real_engines.py",
    "tests/bench/test_bench_cpu_memory.py",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`, a module's tests stay on one worker (its module fixtures start
    once), and the tests of ONE_AT_A_TIME stay together."""
    for item in items:
        module = item.nodeid.split("::")[0]
        group = "one-at-a-time" if module in ONE_AT_A_TIME else module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def servers_shared_or_alone(request, tmp_path_factory) -> Iterator[None]:
    """In a parallel run, every test holds the embedded servers' lock shared, and a test marked
    `alone` (it restarts the Redis every worker uses) holds it alone: it waits for the other
    worker's test to end, and that worker waits for it."""
    if not TEST_WORKER:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    # The workers' folders (popen-gw0, …) share their parent: the run's own folder.
    path = tmp_path_factory.getbasetemp().parent / "servers.lock"
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
            except (OperationalError, CommandError) as error:
                if not aborted_by_postgres(error) or attempt == FLUSH_ATTEMPTS - 1:
                    raise
                time.sleep(min(0.2 * (attempt + 1), 1.0))

    testcases.TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]
    yield
    testcases.TransactionTestCase._fixture_teardown = original  # type: ignore[method-assign]


def aborted_by_postgres(error: BaseException | None) -> bool:
    """PostgreSQL's abort (a deadlock, or a lock not had) is an OperationalError; Django's flush
    command wraps it in its own CommandError, whose words ("couldn't be flushed") do not say why."""
    while error is not None:
        if isinstance(error, OperationalError):
            return True
        error = error.__cause__
    return False


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
