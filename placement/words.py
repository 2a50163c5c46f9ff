"""How Berth writes its numbers: memory, percents, counts of things, speeds and times.

The one home of these words, for every layer: the pages' template filters, the messages the
domain writes (reasons, events, refusals) and the API all call these, so that a size reads the
same in a NoFit reason, on a page and in a message. Pure Python (placement is the lowest layer).
"""

from __future__ import annotations

from datetime import UTC, datetime

from placement.types import GIB

MIB = 1 << 20
NOTHING = "—"  # what a page shows where there is no value


def gib(value: float | None) -> str:
    """Bytes as GiB (2^30 bytes) with two decimals: 34359738368 → "32.00 GiB"; None → "—"."""
    if value is None:
        return NOTHING
    return f"{value / GIB:,.2f} GiB"


def in_gib(value: float) -> float:
    """Bytes as a number of GiB rounded to two decimals, for JSON (the API, scenarios)."""
    return round(value / GIB, 2)


def percent(value: float | None, of: float | None = None, decimals: int = 0) -> str:
    """A share as a percent: percent(0.45) → "45%"; percent(1, of=4) → "25%"; None → "—".

    A part of a whole (`of` given) never reads above 100% nor below 0%: a file's size is only
    known once it is complete, and a reading may run ahead of the total it is counted against.
    A share alone is written as it is (an operator may ask for 120% of an accelerator).
    """
    if value is None:
        return NOTHING
    share = value if of is None else share_of(value, of)
    return f"{share:.{decimals}%}"


def share_of(done: float, total: float | None) -> float:
    """done / total, between 0 and 1; 0 when the total is not known (None or 0)."""
    if not total or total < 0:
        return 0.0
    return min(1.0, max(0.0, done / total))


def percent_of(done: float, total: float | None) -> int:
    """A whole percent for progress bars: percent_of(1, 4) → 25, between 0 and 100."""
    return round(100 * share_of(done, total))


def plural(count: float, one: str, many: str) -> str:
    """The count and the word that agrees with it: "1 copy", "0 copies", "2 copies"."""
    number = str(count) if isinstance(count, int) else f"{count:g}"
    return f"{number} {one if count == 1 else many}"


def per_second(amount: float | None, unit: str) -> str:
    """A rate with one decimal: per_second(12.34, "tokens") → "12.3 tokens/s"; None → "—"."""
    if amount is None or amount < 0:
        return NOTHING  # a counter that went back (an engine restarted) has no rate
    return f"{amount:,.1f} {unit}/s"


def bytes_per_second(value: float | None) -> str:
    """A transfer speed in MiB/s (2^20 bytes); "—" while nothing has moved yet."""
    return per_second(value / MIB, "MiB") if value else NOTHING


def billions(value: float | None) -> str:
    """A count of parameters in billions: 7_241_732_096 → "7.2 B"; "—" when not known."""
    if not value or value < 0:
        return NOTHING
    return f"{value / 1e9:,.1f} B"


def when(moment: datetime | None) -> str:
    """A date and time to the minute with its zone written: "2026-12-01 20:24 UTC".

    Times are written in UTC (the server's zone); a naive time is taken to be UTC already.
    """
    return NOTHING if moment is None else f"{in_utc(moment):%Y-%m-%d %H:%M} UTC"


def day(moment: datetime | None) -> str:
    """The date alone, in UTC: "2026-12-01"."""
    return NOTHING if moment is None else f"{in_utc(moment):%Y-%m-%d}"


def in_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
