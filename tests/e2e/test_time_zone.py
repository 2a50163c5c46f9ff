"""The browser tells the console its time zone (static/js/time_zone.js); without JavaScript,
pages show UTC and say so."""

from __future__ import annotations

import pytest

from console.models import Role
from tests import factories
from tests.e2e.test_navigation import log_in

pytestmark = pytest.mark.e2e


def opened_in(browser, **options):
    context = browser.new_context(**options)
    page = context.new_page()
    page.set_default_timeout(15_000)
    return context, page


@pytest.mark.django_db(transaction=True)
def test_pages_show_times_in_the_browser_s_zone_when_none_was_chosen(browser, console_url):
    factories.add_member(factories.make_user("bob"), factories.make_team("red"), Role.OPERATOR)
    context, page = opened_in(browser, timezone_id="Asia/Tokyo")
    try:
        log_in(page, console_url, "bob")  # the login page already said the zone
        assert page.locator("#shown-zone").inner_text() == "Times in Asia/Tokyo"
        page.goto(f"{console_url}/account/")
        assert "your browser's zone, Asia/Tokyo." in page.locator("#time-zone-now").inner_text()
    finally:
        context.close()


@pytest.mark.django_db(transaction=True)
def test_without_javascript_pages_say_their_times_are_in_utc(browser, console_url):
    factories.make_user("carol")
    context, page = opened_in(browser, timezone_id="Asia/Tokyo", java_script_enabled=False)
    try:
        log_in(page, console_url, "carol")
        assert page.locator("#shown-zone").inner_text() == "Times in UTC"
    finally:
        context.close()
