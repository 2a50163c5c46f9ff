"""A quota's windows (UTC) and its limits' rules, worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.quotas import QuotaRefused, checked_limits, limit_value, window


def at(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()


def test_a_day_runs_from_midnight_to_midnight_utc():
    assert window("tokens_per_day", at(2026, 12, 7, 13, 30, 5)) == (
        at(2026, 12, 7),
        at(2026, 12, 8),
    )


def test_december_ends_at_the_first_of_january():
    assert window("tokens_per_month", at(2026, 12, 31, 23, 59, 59)) == (
        at(2026, 12, 1),
        at(2027, 1, 1),
    )


def test_february_of_a_leap_year_ends_on_the_first_of_march():
    assert window("tokens_per_month", at(2028, 2, 29, 12)) == (at(2028, 2, 1), at(2028, 3, 1))


def test_a_minute_of_tokens_is_the_clocks_minute():
    assert window("tokens_per_minute", at(2026, 12, 7, 1, 2, 59)) == (
        at(2026, 12, 7, 1, 2),
        at(2026, 12, 7, 1, 3),
    )


def test_a_limit_is_a_whole_number_from_one():
    assert limit_value("25") == 25 and limit_value(None) is None and limit_value("") is None
    with pytest.raises(
        QuotaRefused, match=r"^must be a whole number from 1 to 1,000,000,000,000,000, not 'ten'$"
    ):
        limit_value("ten")
    with pytest.raises(
        QuotaRefused, match=r"^must be at least 1, not 0; leave it out for no limit$"
    ):
        limit_value(0)
    with pytest.raises(
        QuotaRefused, match=r"^must be a whole number from 1 to 1,000,000,000,000,000, not True$"
    ):
        limit_value(True)


def test_the_refusal_names_the_limit():
    with pytest.raises(QuotaRefused) as refused:
        checked_limits({"tokens_per_month": -1})
    assert (refused.value.field, str(refused.value)) == (
        "tokens_per_month",
        "tokens_per_month: must be at least 1, not -1; leave it out for no limit",
    )
