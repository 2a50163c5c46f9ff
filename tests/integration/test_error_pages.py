"""Error pages say what happened in words and where to go; API paths keep their JSON errors."""

from __future__ import annotations

import json

import pytest
from django.test import Client, RequestFactory
from django.utils.module_loading import import_string

from console.models import ApiKey
from console.urls import handler500

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return response.content.decode()


def test_an_unknown_deployment_is_not_found_in_words_with_the_way_back(as_dave, red_deployment):
    response = as_dave.get(f"/deployments/{red_deployment.pk}/")
    assert response.status_code == 404
    page = text(response)
    assert "<h1>Not found</h1>" in page
    assert "No such deployment in your teams." in page
    assert 'href="/deployments/">Your deployments</a>' in page
    assert 'class="sidebar"' in page  # the signed-in layout, with the navigation


def test_a_page_that_does_not_exist_names_its_path_not_the_url_patterns(as_carol):
    response = as_carol.get("/no/such/page/", HTTP_REFERER="http://testserver/deployments/")
    assert response.status_code == 404
    page = text(response)
    assert "There is no page at /no/such/page/." in page
    assert "Resolver404" not in page and "tried" not in page
    assert 'href="http://testserver/deployments/">Back to the page you came from</a>' in page


def test_an_anonymous_visitor_of_an_unknown_page_is_offered_the_login(client):
    response = client.get("/nothing-here/")
    assert response.status_code == 404
    page = text(response)
    assert 'href="/login/?next=/nothing-here/">Log in</a>' in page
    assert 'class="sidebar"' not in page


def test_a_back_link_to_another_site_is_not_offered(as_carol):
    response = as_carol.get("/no/such/page/", HTTP_REFERER="https://evil.example/phish")
    assert "evil.example" not in text(response)


def test_a_viewer_stopping_a_deployment_is_told_their_role_only_lets_them_read(
    as_carol, red_deployment
):
    response = as_carol.post(f"/deployments/{red_deployment.pk}/stop/")
    assert response.status_code == 403
    page = text(response)
    assert "<h1>Not allowed</h1>" in page
    assert "Your role in this deployment&#x27;s team only lets you read it." in page
    assert 'href="/deployments/">Your deployments</a>' in page


def test_a_non_staff_user_on_the_status_page_is_told_only_platform_admins_may(as_bob):
    response = as_bob.get("/status/")
    assert response.status_code == 403
    assert "Only platform admins may do this." in text(response)


def test_api_paths_keep_their_json_errors(as_carol, red_deployment):
    unknown = as_carol.get("/api/v1/no-such-endpoint")
    assert unknown.status_code == 404
    assert unknown.json() == {
        "detail": "There is no page at /api/v1/no-such-endpoint.",
        "field": "",
    }
    refused = as_carol.post(f"/api/v1/deployments/{red_deployment.pk}/stop")
    assert refused.status_code == 403
    assert refused.json()["detail"] == "Your role in this deployment's team only lets you read it."


def test_a_form_posted_without_a_cookie_says_cookies_may_be_blocked(bob):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    response = client.post("/account/api-keys/", {"name": "notebook", "scope": "read"})
    assert response.status_code == 403
    page = text(response)
    assert "<h1>The form was not accepted</h1>" in page
    assert "cookies for this site may be blocked." in page
    assert "Allow cookies for this site, then reload the page and try again." in page
    assert not ApiKey.objects.filter(user=bob).exists()


def test_a_form_with_an_old_token_says_it_was_open_too_long_and_to_reload(bob):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    client.get("/account/api-keys/")  # the page sets the csrftoken cookie, as a browser keeps it
    response = client.post(
        "/account/api-keys/",
        {"name": "notebook", "scope": "read", "csrfmiddlewaretoken": "x" * 64},
        HTTP_REFERER="http://testserver/account/api-keys/",
    )
    assert response.status_code == 403
    page = text(response)
    assert "the page was open for too long, or you logged in or out in another tab" in page
    assert "Reload the page and try again" in page
    assert 'href="http://testserver/account/api-keys/">Back to the page you came from</a>' in page


def test_a_form_sent_from_another_address_names_the_trusted_origins_setting(bob):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    client.get("/account/api-keys/")
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/account/api-keys/",
        {"name": "notebook", "scope": "read", "csrfmiddlewaretoken": token},
        HTTP_ORIGIN="https://proxy.example",
    )
    assert response.status_code == 403
    assert "BERTH_CSRF_TRUSTED_ORIGINS" in text(response)


def test_the_login_form_without_a_cookie_explains_and_offers_the_login(db):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/login/", {"username": "bob", "password": "x"})
    assert response.status_code == 403
    page = text(response)
    assert "cookies for this site may be blocked." in page
    assert 'class="sidebar"' not in page


def test_the_server_error_page_is_static_words_with_the_time_and_the_way_back():
    request = RequestFactory().get("/deployments/")
    response = import_string(handler500)(request)
    assert response.status_code == 500
    page = text(response)
    assert "<h1>Something went wrong</h1>" in page
    assert "The error is in the web server's log." in page
    assert "tell a platform admin the time above" in page
    assert 'href="/">Back to Berth</a>' in page


def test_a_server_error_on_an_api_path_answers_json():
    request = RequestFactory().get("/api/v1/deployments")
    response = import_string(handler500)(request)
    assert response.status_code == 500
    assert json.loads(response.content)["detail"].startswith("Berth failed on this request")
