"""Template filters for units and badges, so every page shows memory the same way."""

from __future__ import annotations

from django import template

from deployments.choices import badge_colour as colour_of

register = template.Library()
GIB = 2**30


@register.filter
def gib(value: int | None) -> str:
    """Bytes as GiB with two decimals (pages say GiB, meaning 2^30 bytes)."""
    if value is None:
        return "—"
    return f"{value / GIB:,.2f} GiB"


@register.filter
def badge_colour(state: str) -> str:
    return colour_of(state)


@register.filter
def billions(value: int | None) -> str:
    if not value:
        return "—"
    return f"{value / 1e9:,.1f} B"
