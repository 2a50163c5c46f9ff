"""How Berth writes its numbers: one home for GiB, percents, plurals, rates and times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from placement import GIB
from placement.words import (
    billions,
    bytes_per_second,
    day,
    gib,
    in_gib,
    per_second,
    percent,
    percent_of,
    plural,
    when,
)


def test_gib_has_two_decimals_and_a_thousands_separator() -> None:
    assert gib(12 * GIB + GIB // 3) == "12.33 GiB"
    assert gib(2048 * GIB) == "2,048.00 GiB"
    assert gib(GIB * 1.5) == "1.50 GiB"


def test_gib_of_nothing_bad_or_zero() -> None:
    assert gib(None) == "—"
    assert gib(0) == "0.00 GiB"
    assert gib(-GIB) == "-1.00 GiB"  # a shortfall reads as one


def test_gib_as_a_json_number_is_rounded_to_two_decimals() -> None:
    assert in_gib(GIB + GIB // 3) == 1.33
    assert in_gib(0) == 0


def test_a_share_is_a_percent_without_a_space() -> None:
    assert percent(0.45) == "45%"
    assert percent(0.225, decimals=1) == "22.5%"
    assert percent(1.2) == "120%"  # an operator may ask for more than the whole


def test_a_part_of_a_whole_stays_between_0_and_100_percent() -> None:
    assert percent(1, of=4) == "25%"
    assert percent(5, of=4) == "100%"
    assert percent(-1, of=4) == "0%"
    assert percent(1, of=0) == "0%"
    assert percent(1, of=None) == "100%"  # no total: the value is the share itself


def test_percent_of_nothing_is_a_dash() -> None:
    assert percent(None) == "—"


def test_percent_of_for_progress_bars_is_a_whole_number() -> None:
    assert percent_of(1, 4) == 25
    assert percent_of(1, 3) == 33
    assert percent_of(9, 4) == 100
    assert percent_of(1, 0) == 0
    assert percent_of(1, None) == 0
    assert percent_of(-1, 4) == 0


@pytest.mark.parametrize(
    ("count", "words"),
    [(0, "0 copies"), (1, "1 copy"), (2, "2 copies"), (1000, "1000 copies"), (-1, "-1 copies")],
)
def test_plural_agrees_with_the_count(count: int, words: str) -> None:
    assert plural(count, "copy", "copies") == words


def test_plural_of_a_fraction_or_a_whole_float() -> None:
    assert plural(0.5, "GPU", "GPUs") == "0.5 GPUs"
    assert plural(2.0, "GPU", "GPUs") == "2 GPUs"
    assert plural(1.0, "GPU", "GPUs") == "1 GPU"


def test_a_rate_has_one_decimal_and_its_unit() -> None:
    assert per_second(12.34, "tokens") == "12.3 tokens/s"
    assert per_second(0, "tokens") == "0.0 tokens/s"
    assert per_second(1234.5, "tokens") == "1,234.5 tokens/s"


def test_a_rate_that_is_not_known_or_went_back_is_a_dash() -> None:
    assert per_second(None, "tokens") == "—"
    assert per_second(-1.0, "tokens") == "—"


def test_bytes_per_second_are_mib_a_second() -> None:
    assert bytes_per_second(16 * 2**20) == "16.0 MiB/s"
    assert bytes_per_second(0) == "—"  # nothing moved yet
    assert bytes_per_second(None) == "—"
    assert bytes_per_second(-5) == "—"


def test_billions_of_parameters() -> None:
    assert billions(7_241_732_096) == "7.2 B"
    assert billions(None) == "—"
    assert billions(0) == "—"
    assert billions(-1) == "—"


def test_when_writes_the_minute_and_the_utc_zone() -> None:
    assert when(datetime(2026, 12, 1, 20, 24, 59, tzinfo=UTC)) == "2026-12-01 20:24 UTC"


def test_when_turns_another_zone_into_utc() -> None:
    berlin = timezone(timedelta(hours=1))
    assert when(datetime(2026, 12, 1, 21, 24, tzinfo=berlin)) == "2026-12-01 20:24 UTC"
    assert day(datetime(2026, 12, 2, 0, 30, tzinfo=berlin)) == "2026-12-01"


def test_a_naive_time_is_taken_as_utc() -> None:
    assert when(datetime(2026, 12, 1, 20, 24)) == "2026-12-01 20:24 UTC"


def test_no_time_is_a_dash() -> None:
    assert when(None) == "—"
    assert day(None) == "—"
