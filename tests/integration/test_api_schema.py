"""The OpenAPI document tells the truth, since the typed client is built on it: schemathesis
runs every check it has against the API, with valid and invalid data, as `st run --checks all`
would; and every /api/ path answers the API's JSON, unknown paths and malformed ids included."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from django.http import HttpRequest, HttpResponse
from django.test import Client
from ninja.errors import ValidationError
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.config._checks import POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES
from schemathesis.core import SCHEMATHESIS_TEST_CASE_HEADER
from schemathesis.engine import events, from_schema
from schemathesis.generation.stateful import STATEFUL_TESTS_LABEL

from clusters.models import Cluster
from console.api_v1 import api
from console.models import ApiKey
from tests import factories

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture
def demo(db) -> Cluster:
    call_command("seed_demo")
    return Cluster.objects.get(name="demo")


def key_headers(user: Any) -> dict[str, str]:
    _key, secret = ApiKey.issue(user, "test")
    return {"Authorization": f"Bearer {secret}"}


# --- every /api/ path answers JSON ------------------------------------------------------------

MALFORMED = [
    ("get", "/api/v1/nope"),
    ("get", "/api/nope"),
    ("post", "/api/v1/deployments/null,null/stop"),
    ("get", "/api/v1/deployments/-1"),
    ("get", "/api/v1/deployments/0.5/logs"),
    ("post", "/api/v1/keys/AAA/revoke"),
    ("get", "/api/v1/clusters/true"),
]
NOT_ALLOWED = [
    ("put", "/api/v1/deployments", "GET, POST"),
    ("get", "/api/v1/fit-check", "POST"),
    ("options", "/api/v1/me", "GET"),
]


@pytest.mark.parametrize("debug", [False, True], ids=["debug off", "debug on"])
def test_unknown_paths_and_malformed_ids_answer_the_apis_json_404(alice, settings, debug):
    settings.DEBUG = debug  # with DEBUG on, Django would answer its HTML debug page
    headers = key_headers(alice)
    for method, path in MALFORMED:
        response = getattr(Client(), method)(path, headers=headers)
        assert response.status_code == 404, path
        assert response["Content-Type"].startswith("application/json"), path
        assert response.json() == {"detail": f"There is no page at {path}.", "field": ""}


def test_a_method_a_path_does_not_answer_is_a_json_405_with_allow(alice):
    headers = key_headers(alice)
    for method, path, allowed in NOT_ALLOWED:
        response = getattr(Client(), method)(path, headers=headers)
        assert response.status_code == 405, path
        assert response["Allow"] == allowed
        assert response.json() == {
            "detail": f"{method.upper()} is not allowed at {path}; it answers {allowed}.",
            "field": "",
        }


def test_refusals_before_the_api_are_in_its_error_body(alice):
    anonymous = Client().get(f"{API}/deployments")
    assert anonymous.status_code == 401
    assert anonymous.json() == {
        "detail": "Authentication required: send Authorization: Bearer <API key>.",
        "field": "",
    }
    wrong_key = Client().get(f"{API}/me", headers={"Authorization": "Bearer berth_nope"})
    assert wrong_key.status_code == 401 and wrong_key.json()["detail"].startswith(
        "The API key is not valid"
    )


# --- schemathesis, every check, against a server on this test's transaction -------------------


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a thousand request lines would bury the failures


class OnTestConnection:
    """Django on this test's database connection, whichever thread calls it: the test's rows
    are in its transaction, never committed, as Django's LiveServerThread shares an in-memory
    SQLite database with its server thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.connection = connections[DEFAULT_DB_ALIAS]
        self.connection.inc_thread_sharing()

    def use(self) -> None:
        connections[DEFAULT_DB_ALIAS] = self.connection

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.use()
        return self.app(environ, start_response)


@contextmanager
def connections_kept_open() -> Iterator[None]:
    """Django closes "old" connections when a request starts and ends; here that would close
    the test's own transaction. django.test.Client avoids it the same way."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@contextmanager
def served(app: OnTestConnection) -> Iterator[str]:
    """The console over real HTTP, as the schemathesis CLI reaches it: its in-process WSGI
    transport cannot send the probes of the ignored_auth check (it passes `max_redirects` to
    werkzeug, 4.32), and over HTTP every check runs as it would against a deployed console."""
    server = make_server("127.0.0.1", 0, app, handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    with connections_kept_open():
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()
            server.server_close()
            app.connection.dec_thread_sharing()


class UsableKey:
    """A key of the user's that works: issued again whenever the run revoked it, since the
    fuzzer revokes keys by id (POST /keys/{key_id}/revoke), the one it calls with among them,
    as any client may. schemathesis makes the instance: usable_key_of() names user and
    database."""

    user: Any
    database: OnTestConnection

    def __init__(self) -> None:
        self.key, self.secret = ApiKey.issue(self.user, "fuzzing")

    def get(self, case: Any, ctx: Any) -> str:
        self.database.use()  # schemathesis asks from its own worker threads
        if not ApiKey.objects.filter(pk=self.key.pk, revoked_at=None).exists():
            self.key, self.secret = ApiKey.issue(self.user, "fuzzing")
        return self.secret

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


def usable_key_of(user: Any, database: OnTestConnection) -> type[UsableKey]:
    return type("UsableKey", (UsableKey,), {"user": user, "database": database})


def every_operation(document: dict[str, Any]) -> set[str]:
    paths = document["paths"].items()
    return {f"{method.upper()} {path}" for path, methods in paths for method in methods}


def every_check() -> list[str]:
    load_all_checks()
    return sorted(CHECKS.get_all_names())


# Cases per operation and phase; the coverage phase sends its own (boundaries, each field
# missing or of each wrong type, every undeclared method) on top of these.
MAX_EXAMPLES = 8
# A request the schema allows may still be refused for what is there, or is not: a name taken,
# a model not in the catalog, a cursor of another list (400), or what the model cannot have (a
# tensor parallel that does not divide its heads: 422), as README and the SDK's errors have it.
# The schema's rules are the other refusals, which the run must never meet (Refusals).
SEMANTIC_REFUSALS = ["400", "422"]


def fuzzing_config(base_url: str) -> SchemathesisConfig:
    config = SchemathesisConfig.from_dict(
        {
            "base-url": base_url,
            "seed": 21,
            "workers": 1,  # the server thread shares one database connection
            "suppress-health-check": ["all"],
            "generation": {
                "mode": "all",  # valid data must be taken, invalid data refused
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
            },
            "phases": {"stateful": {"max-steps": 25}},
            "checks": {
                "positive_data_acceptance": {
                    "expected-statuses": [
                        *POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES,
                        *SEMANTIC_REFUSALS,
                    ]
                }
            },
        }
    )
    config.projects.override.checks.update(included_check_names=["all"])  # st run --checks all
    return config


class Refusals:
    """What the API raised for each request it refused, by schemathesis' case id: a request
    the schema allows that the API's reading refused (pydantic's ValidationError, which the
    actions' rules raise too, console/api_schema.py's ruled()) is a rule the schema does not
    state, whatever the status says."""

    def __init__(self) -> None:
        self.raised: dict[str, Exception] = {}
        self.answer = api.on_exception

    def on_exception(self, request: HttpRequest, error: Exception) -> HttpResponse:
        self.raised[request.headers.get(SCHEMATHESIS_TEST_CASE_HEADER, "")] = error
        return self.answer(request, error)

    def of_valid_data(self, recorder: Any) -> Iterator[str]:
        for case_id, node in recorder.cases.items():
            meta = node.value.meta
            error = self.raised.get(case_id)
            if meta and meta.generation.mode.is_positive and isinstance(error, ValidationError):
                yield f"{recorder.label}: a valid request refused by a rule: {error.errors}"


def deletion_goes_on(node: Any) -> bool:
    """DELETE /deployments/{id} answers 202: accepted, the copies stop first, and until then
    the deployment is there (state stopping) and reads as it is. use_after_free takes any 2xx
    as done; the worker that finishes the deletion does not run in this test."""
    failure = node.failure_info.failure
    return node.name == "use_after_free" and failure.free.startswith("DELETE /api/v1/deployments/")


@dataclass
class Findings:
    refusals: Refusals
    cases: int = 0
    operations: set[str] = field(default_factory=set)
    checks: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def add(self, event: events.EngineEvent) -> None:
        if isinstance(event, events.ScenarioFinished):
            self.add_scenario(event)
        elif isinstance(event, events.NonFatalError | events.FatalError):
            self.problems.append(f"schemathesis could not run: {event!r}")
        elif isinstance(event, events.EngineFinished):
            self.problems.extend(
                f"{failure.title}: {failure.message}" for failure in event.failures
            )

    def add_scenario(self, event: events.ScenarioFinished) -> None:
        self.cases += len(event.recorder.cases)
        self.operations.add(event.recorder.label)
        self.problems.extend(self.refusals.of_valid_data(event.recorder))
        for nodes in event.recorder.checks.values():
            for node in nodes:
                self.checks.add(node.name)
                if node.failure_info is not None and not deletion_goes_on(node):
                    self.problems.append(failure_words(event, node))


def failure_words(event: events.ScenarioFinished, node: Any) -> str:
    failure, sample = node.failure_info.failure, node.failure_info.code_sample
    where = f"{event.recorder.label} ({event.phase}) {node.name}"
    return f"{where}: {failure.title}\n{failure.message}\n{sample}"


def test_the_openapi_document_tells_the_truth_to_every_schemathesis_check(
    demo, alice, red, monkeypatch
):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # adding a model: no hub answers
    document = Client().get(f"{API}/openapi.json", headers=key_headers(alice)).json()
    factories.make_copy(factories.make_deployment("target", red, cluster=demo))
    database = OnTestConnection(WSGIHandler())
    refusals = Refusals()
    monkeypatch.setattr(api, "on_exception", refusals.on_exception)
    findings = Findings(refusals)
    started = time.monotonic()
    with served(database) as base_url:
        schema = schemathesis.openapi.from_dict(document, config=fuzzing_config(base_url))
        schema.auth(refresh_interval=None)(usable_key_of(alice, database))
        for event in from_schema(schema).execute():
            findings.add(event)
    print(f"{findings.cases} cases in {time.monotonic() - started:.0f} s")
    assert not findings.problems, "\n\n".join(findings.problems)
    assert findings.operations - {STATEFUL_TESTS_LABEL} == every_operation(document)
    assert findings.cases > 1000
    # Every check ran, max_response_time too (`--checks all` turns it on; no limit is set).
    assert set(every_check()) <= findings.checks
