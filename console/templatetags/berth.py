"""Template filters for units and badges, so every page shows memory the same way."""

from __future__ import annotations

from django import template

from console.choices import Badge, StateChoices

register = template.Library()
GIB = 2**30


@register.filter
def gib(value: int | None) -> str:
    """Bytes as GiB with two decimals (pages say GiB, meaning 2^30 bytes)."""
    if value is None:
        return "—"
    return f"{value / GIB:,.2f} GiB"


@register.filter
def badge(state: object) -> str:
    """A state's badge colour (CSS class badge-<colour>), from the state's own vocabulary.
    Rows' state fields give their states (console.choices.StateField), never bare text."""
    if isinstance(state, StateChoices):
        return state.colour
    return Badge.GREY  # not a state of any vocabulary (e.g. none yet)


@register.filter
def billions(value: int | None) -> str:
    if not value:
        return "—"
    return f"{value / 1e9:,.1f} B"
