"""The Revisions tab of a deployment's page: every change listed with what it changed, two
compared, Roll back to N with a reason, a bad number said in words; viewers only read."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from deployments.models import Deployment

pytestmark = pytest.mark.django_db


def page_of(response) -> BeautifulSoup:
    assert response.status_code == 200
    return BeautifulSoup(response.content, "html.parser")


def routed_twice(client, deployment) -> str:
    url = f"/deployments/{deployment.pk}"
    client.post(f"{url}/routing/", {"routing": "prefix"})
    client.post(f"{url}/queue/", {"max_waiting": "8", "queue_wait_s": ""})
    return f"{url}/revisions/"


def test_the_tab_lists_each_revision_with_its_changes_newest_first(as_bob, red_deployment):
    url = routed_twice(as_bob, red_deployment)
    page = page_of(as_bob.get(url))
    rows = page.select("#revisions tbody tr")
    assert [row["data-revision"] for row in rows] == ["3", "2", "1"]
    assert [li.text for li in rows[0].select(".changes li")] == ["queue length: 0 → 8"]
    assert [li.text for li in rows[1].select(".changes li")] == ["routing: least_loaded → prefix"]
    assert "(now)" in rows[0].text and "(now)" not in rows[1].text
    assert rows[0].select_one(".badge")["data-state"] == "pending"
    # The current one has nothing to roll back to; each other does.
    assert [b.text for b in page.select("#revisions button")] == [
        "Roll back to 2",
        "Roll back to 1",
    ]
    detail = page_of(as_bob.get(f"/deployments/{red_deployment.pk}/"))
    assert detail.find("a", string="Revisions")["href"] == url


def test_two_revisions_compare_and_a_number_it_has_not_is_said(as_bob, red_deployment):
    url = routed_twice(as_bob, red_deployment)
    page = page_of(as_bob.get(url, {"compare": "1", "to": "3"}))
    assert page.select_one("#comparison h2").text == "From revision 1 to revision 3"
    assert [li.text for li in page.select("#comparison li")] == [
        "routing: least_loaded → prefix",
        "queue length: 0 → 8",
    ]
    missing = page_of(as_bob.get(url, {"compare": "1", "to": "7"}))
    assert (
        missing.select_one("p.error").text == "red-qwen has no revision 7: it has revisions 1 to 3."
    )


def test_roll_back_from_the_tab_keeps_the_reason_and_a_bad_one_changes_nothing(
    as_bob, red_deployment
):
    url = routed_twice(as_bob, red_deployment)
    done = page_of(
        as_bob.post(f"{url}rollback/", {"revision": "1", "comment": "slow"}, follow=True)
    )
    assert "Roll back to revision 1." in done.text
    after = Deployment.objects.get(pk=red_deployment.pk)
    assert (after.routing, after.max_waiting) == ("least_loaded", 0)
    newest = done.select("#revisions tbody tr")[0]
    assert newest["data-revision"] == "4"
    assert newest.select_one("em").text == "“slow”"
    refused = page_of(as_bob.post(f"{url}rollback/", {"revision": "x"}, follow=True))
    assert "Not done: revision: must be a revision's number, e.g. 3." in refused.text
    assert len(refused.select("#revisions tbody tr")) == 4


def test_auto_rollback_is_turned_on_and_off_from_the_tab(as_bob, red_deployment):
    url = f"/deployments/{red_deployment.pk}/revisions/"
    on = page_of(as_bob.post(f"{url}auto-rollback/", {"enabled": "true"}, follow=True))
    assert (
        "rolled back by itself to the last one that served" in on.select_one("#auto-rollback").text
    )
    assert Deployment.objects.get(pk=red_deployment.pk).auto_rollback is True
    bad = page_of(as_bob.post(f"{url}auto-rollback/", {"enabled": "perhaps"}, follow=True))
    assert "Not done: enabled: 'perhaps' is not a yes or no" in bad.text
    as_bob.post(f"{url}auto-rollback/", {"enabled": "false"})
    assert Deployment.objects.get(pk=red_deployment.pk).auto_rollback is False


def test_a_viewer_reads_the_tab_without_any_form_to_change(as_carol, red_deployment):
    page = page_of(as_carol.get(f"/deployments/{red_deployment.pk}/revisions/"))
    assert len(page.select("#revisions tbody tr")) == 1
    assert page.select("#revisions form, #auto-rollback form") == []
