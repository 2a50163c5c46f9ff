"""Every URL needs a login, and every role sees and changes only what it may."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from console.access import operated_teams
from deployments import actions
from deployments.models import Deployment
from tests import factories

PUBLIC = {"login", "health", "health_web"}
pytestmark = pytest.mark.django_db


def walk(patterns, prefix=""):
    """Every (name, route regex) reachable from the root URLconf."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield entry, prefix + str(entry.pattern)


def fill(route: str, objects: dict[str, str]) -> str:
    """Turn a route (path converters or regex groups) into a real path using real objects."""
    route = route.lstrip("^").rstrip("$").replace("\\Z", "").replace("^", "")

    def value_for(name: str) -> str:
        return objects.get(name, objects["pk"])

    route = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: value_for(m.group(1)), route)
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: value_for(m.group(1)), route)
    route = route.replace("\\", "").replace("/?", "/")
    return "/" + route


@pytest.fixture
def real_objects(red, alice):
    deployment = factories.make_deployment("anon-check", red)
    return {
        "pk": str(deployment.pk),
        "object_id": str(deployment.pk),
        "app_label": "deployments",
        "model_name": "deployment",
        "content_type_id": "1",
        "url": "deployments/deployment/",
        "user_id": str(alice.pk),
        "id": str(alice.pk),
        "uidb64": "MQ",
        "token": "set-password",
        "path": "css/berth.css",
    }


def test_every_url_but_login_static_and_health_refuses_anonymous_users(real_objects):
    client = Client()
    visited, failures = [], []
    for pattern, route in walk(get_resolver().url_patterns):
        path = fill(route, real_objects)
        response = client.get(path)
        visited.append(pattern)
        if pattern.name in PUBLIC:  # /health is 503 here: no background process runs
            assert response.status_code == (503 if pattern.name == "health" else 200), path
            continue
        if response.status_code >= 500:
            failures.append(f"{path} answered {response.status_code}")
        elif response.status_code in (301, 302):
            location = response["Location"]
            if "/login/" not in location and not location.startswith(("/admin/login", "/admin/r/")):
                failures.append(f"{path} redirected to {location}, not to a login page")
        elif response.status_code not in (401, 403, 404, 405):
            failures.append(f"{path} answered {response.status_code} to an anonymous user")
    all_patterns = [p for p, _ in walk(get_resolver().url_patterns)]
    assert len(visited) == len(all_patterns)
    assert len(visited) > 50  # the admin's patterns are included, not skipped
    assert failures == []


def test_health_answers_without_login():
    response = Client().get("/health/web")
    assert response.json() == {"status": "ok", "parts": {"database": "ok", "redis": "ok"}}


def test_an_api_path_answers_401_not_a_login_redirect():
    response = Client().get("/api/v1/me")
    assert response.status_code == 401
    assert response.json()["detail"].startswith("Authentication required")


def test_an_operator_of_another_team_gets_not_found_for_a_deployment(as_bob, bob, dave, red):
    outsider_team = factories.make_team("green")
    theirs = factories.make_deployment("green-qwen", outsider_team)
    assert as_bob.get(f"/deployments/{theirs.pk}/").status_code == 404
    assert "green-qwen" not in as_bob.get("/deployments/").content.decode()


def test_a_user_without_teams_sees_no_deployments(as_dave, red_deployment):
    response = as_dave.get("/deployments/")
    assert "red-qwen" not in response.content.decode()
    assert "No deployments yet." in response.content.decode()
    assert as_dave.get(f"/deployments/{red_deployment.pk}/").status_code == 404


def test_operator_in_one_team_and_viewer_in_another_can_change_only_the_first(
    bob, red_deployment, blue_deployment
):
    from console.access import NEEDS_OPERATE
    from deployments.access import get_deployment

    assert get_deployment(bob, red_deployment.pk, NEEDS_OPERATE) == red_deployment
    assert get_deployment(bob, blue_deployment.pk) == blue_deployment
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        get_deployment(bob, blue_deployment.pk, NEEDS_OPERATE)


def test_a_user_hosts_and_downloads_in_the_teams_they_operate_and_admins_in_every_team(
    alice, bob, carol, dave, red, blue
):
    assert list(operated_teams(alice)) == [blue, red]
    assert list(operated_teams(bob)) == [red]  # a viewer in blue
    assert list(operated_teams(carol)) == []
    assert list(operated_teams(dave)) == []


def test_a_viewer_reads_their_teams_deployment_page(as_carol, red_deployment):
    response = as_carol.get(f"/deployments/{red_deployment.pk}/")
    assert response.status_code == 200
    assert "red-qwen" in response.content.decode()


def changing_urls() -> list[tuple[str, str]]:
    """Views that accept POST and change a deployment, a cluster or a model.

    A user's own API keys and logout are theirs to change, so they are left out. The admin's
    change views are covered for clusters, models and deployments.
    """
    urls = []
    for model in ["clusters/cluster", "catalog/model", "catalog/variant", "deployments/deployment"]:
        urls.append((f"/admin/{model}/add/", model))
    return urls


@pytest.mark.parametrize("url,what", changing_urls())
def test_a_viewer_cannot_change_deployments_clusters_or_models(as_carol, red_deployment, url, what):
    from catalog.models import Model
    from clusters.models import Cluster

    counts = (Cluster.objects.count(), Model.objects.count(), Deployment.objects.count())
    response = as_carol.post(url, {"name": "sneaky", "kind": "simulator", "repo_id": "x/y"})
    # Carol is logged in but not staff: the admin sends her to its own login page (a 302, not a
    # 403), asking to come back to what she tried.
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={url}"
    assert (Cluster.objects.count(), Model.objects.count(), Deployment.objects.count()) == counts


def test_every_admin_model_is_for_platform_admins_only(as_bob, as_alice):
    for model in admin.site._registry:
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert as_bob.get(url).status_code == 302, url
        assert as_alice.get(url).status_code == 200, url


def test_every_page_renders_for_a_logged_in_user_with_the_demo_loaded(as_bob, red):
    from django.core.management import call_command

    from catalog.models import Model
    from clusters.models import Cluster

    call_command("seed_demo")
    deployment = factories.make_deployment(
        "red-demo",
        red,
        model=Model.objects.get(repo_id="Qwen/Qwen3-8B"),
        cluster=Cluster.objects.get(name="demo"),
    )
    pages = [
        "/deployments/",
        f"/deployments/{deployment.pk}/",
        "/models/",
        "/models/?q=qwen",
        "/models/?q=nothing-matches",
        f"/models/{deployment.model_id}/",
        "/models/on-this-server/",
        "/clusters/",
        f"/clusters/{deployment.cluster_id}/",
        "/chat/",
        "/account/api-keys/",
    ]
    for url in pages:
        assert as_bob.get(url).status_code == 200, url


DEPLOYMENT_ACTIONS = [
    "deployment_engine_settings",
    "deployment_engine_settings_check",
    "deployment_scale_dialog",
    "deployment_scale_fit",
    "deployment_offer_in_chat",
    "deployment_reply_wait",
    "deployment_routing",
    "deployment_queue",
    "deployment_scale",
    "deployment_autoscaling",
    "deployment_stop",
    "deployment_start",
    "deployment_delete",
    "deployment_check_now",
    "deployment_sync_files",
    "deployment_rollback",
    "deployment_auto_rollback",
]


def test_every_deployment_action_view_is_listed_here():
    """A new action view must join the role tests below; this fails until it does."""
    names = {p.name for p, _ in walk(get_resolver().url_patterns) if p.name}
    reading = {
        "deployment_list",
        "deployment_detail",
        "deployment_logs",
        "deployment_logs_download",
        "deployment_revisions",
    }
    # The bulk bar acts on a selection, not on one deployment: its role tests (a viewer's 403,
    # an outsider's 404, for every selected row) are in test_bulk_actions.py.
    on_a_selection = {"deployment_bulk"}
    actions = {n for n in names if n.startswith("deployment_")} - reading - on_a_selection
    assert actions == set(DEPLOYMENT_ACTIONS)


def snapshot(deployment) -> tuple:
    from deployments.models import Event

    row = Deployment.objects.filter(pk=deployment.pk).values().first()
    return row, Event.objects.count()


@pytest.mark.parametrize("name", DEPLOYMENT_ACTIONS)
def test_a_viewer_posting_any_deployment_action_gets_403_and_nothing_changes(
    as_carol, red_deployment, name
):
    from django.urls import reverse

    before = snapshot(red_deployment)
    response = as_carol.post(reverse(name, args=[red_deployment.pk]), {"copies": "3"})
    assert response.status_code == 403
    assert snapshot(red_deployment) == before


@pytest.mark.parametrize("name", DEPLOYMENT_ACTIONS)
def test_an_operator_in_another_team_gets_not_found_for_any_action(as_bob, name):
    from django.urls import reverse

    green = factories.make_deployment("green-one", factories.make_team("green"))
    before = snapshot(green)
    assert as_bob.post(reverse(name, args=[green.pk]), {"copies": "3"}).status_code == 404
    assert snapshot(green) == before


def test_bob_may_act_on_reds_deployment_but_only_read_blues(
    as_bob, red_deployment, blue_deployment
):
    assert as_bob.post(f"/deployments/{red_deployment.pk}/check/").status_code == 302
    assert as_bob.post(f"/deployments/{blue_deployment.pk}/check/").status_code == 403
    page = as_bob.get(f"/deployments/{blue_deployment.pk}/").content.decode()
    assert "Check now" not in page and "blue-qwen" in page


def test_a_bad_scale_says_what_is_wrong_and_changes_nothing(as_bob, red_deployment):
    before = snapshot(red_deployment)
    response = as_bob.post(
        f"/deployments/{red_deployment.pk}/scale/", {"copies": "-2"}, follow=True
    )
    assert "Not done: copies: -2 is not allowed: use 0 to 1000." in response.content.decode()
    assert snapshot(red_deployment)[0] == before[0]
    response = as_bob.post(
        f"/deployments/{red_deployment.pk}/scale/",
        {"copies": "1", "accelerators_per_copy": "1.5"},
        follow=True,
    )
    assert "Not done: accelerators per copy: 1.5 is not a size" in response.content.decode()


def test_chat_name_and_reply_wait_forms_refuse_bad_values_and_save_good_ones(
    as_bob, red_deployment
):
    url = f"/deployments/{red_deployment.pk}"
    page = as_bob.post(f"{url}/reply-wait/", {"reply_wait_s": "5"}, follow=True).content.decode()
    assert "Not done: reply wait: 5 s is not allowed: use 10 to 1800 seconds" in page
    page = as_bob.post(f"{url}/reply-wait/", {"reply_wait_s": "abc"}, follow=True).content.decode()
    assert "must be a whole number of seconds" in page
    page = as_bob.post(f"{url}/chat-name/", {"chat_name": "x" * 101}, follow=True).content.decode()
    assert "use at most 100 characters" in page
    assert Deployment.objects.get(pk=red_deployment.pk).reply_wait_s is None
    as_bob.post(f"{url}/reply-wait/", {"reply_wait_s": "60"})
    as_bob.post(f"{url}/chat-name/", {"chat_name": "qwen"})
    saved = Deployment.objects.get(pk=red_deployment.pk)
    assert (saved.reply_wait_s, saved.chat_name) == (60, "qwen")


def test_the_routing_form_shows_the_policy_refuses_an_unknown_one_and_saves_a_good_one(
    as_bob, as_carol, red_deployment
):
    url = f"/deployments/{red_deployment.pk}"
    page = as_bob.get(f"{url}/").content.decode()
    assert "<small>Routing</small><strong>Least loaded</strong>" in page
    assert '<option value="prefix">Prefix-aware</option>' in page
    refused = as_bob.post(f"{url}/routing/", {"routing": "nearest"}, follow=True).content.decode()
    assert (
        "Not done: routing: &#x27;nearest&#x27; is not a routing policy: use least_loaded, "
        "prefix, session" in refused
    )
    saved = as_bob.post(f"{url}/routing/", {"routing": "session"}, follow=True).content.decode()
    assert "Requests are now routed to the copy each session used last, load permitting." in saved
    assert "<small>Routing</small><strong>Session affinity</strong>" in saved
    assert as_carol.post(f"{url}/routing/", {"routing": "prefix"}).status_code == 403
    assert Deployment.objects.get(pk=red_deployment.pk).routing == "session"


def test_the_queue_form_refuses_bad_bounds_and_saves_good_ones(as_bob, as_carol, red_deployment):
    url = f"/deployments/{red_deployment.pk}"
    assert "no queue" in as_bob.get(f"{url}/").content.decode()
    page = as_bob.post(f"{url}/queue/", {"max_waiting": "lots"}, follow=True).content.decode()
    assert "Not done: queue: must be a whole number, 0 or more" in page
    page = as_bob.post(
        f"{url}/queue/", {"max_waiting": "4", "queue_wait_s": "9999"}, follow=True
    ).content.decode()
    assert "Not done: queue wait: 9999 s is not allowed: use 1 to 1800 seconds" in page
    page = as_bob.post(
        f"{url}/queue/", {"max_waiting": "4", "queue_wait_s": ""}, follow=True
    ).content.decode()
    assert "Queue when every copy is full: up to 4 requests, each for the reply wait." in page
    assert as_carol.post(f"{url}/queue/", {"max_waiting": "9"}).status_code == 403
    saved = Deployment.objects.get(pk=red_deployment.pk)
    assert (saved.max_waiting, saved.queue_wait_s) == (4, None)


def test_a_chat_name_that_is_another_deployments_name_is_refused_and_not_proposed(
    as_bob, red, red_deployment
):
    other = factories.make_deployment("qwen3-8b", red)
    url = f"/deployments/{red_deployment.pk}"
    page = as_bob.post(f"{url}/chat-name/", {"chat_name": other.name}, follow=True)
    assert "qwen3-8b is the name of another deployment; pick another chat name" in (
        page.content.decode()
    )
    assert Deployment.objects.get(pk=red_deployment.pk).chat_name == ""
    assert actions.chat_name_taken("qwen3-8b", "new-name")  # the wizard proposes another
    assert not actions.chat_name_taken("qwen3-8b", "qwen3-8b")  # its own name
    other.chat_name = other.name  # offered under its own name: others may share it in chat
    other.save()
    assert not actions.chat_name_taken("qwen3-8b", "new-name")
