"""The list toolkit: a list's filters as one form, read by its page and by its API alike.

Each field of a ListFilter narrows the rows through the form's `filter_<field>(rows, value)`. A
page leaves a bad value out and shows the rest (the form says what was wrong beside the field);
the API refuses it with the field's name and the reason (`refusal`).

A list that pages hands out cursors (`encode_cursor`): the key of the last row shown, signed
with the list's name, so that a cursor changed by hand or taken from another list is refused
(`decode_cursor`) rather than read as a place it never was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django import forms
from django.core import signing
from django.db.models import QuerySet

Rows = TypeVar("Rows", bound=QuerySet[Any])
CURSOR_SALT = "berth.lists.cursor"


class FilterRefused(Exception):
    """A filter value the API cannot use (400): `field` names the filter."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ListFilter(forms.Form):
    def valid(self) -> dict[str, Any]:
        """The values that passed, even when another one did not; empty values filter nothing."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return {name: value for name, value in cleaned.items() if value not in (None, "")}

    def apply(self, rows: Rows) -> Rows:
        for name, value in self.valid().items():
            rows = getattr(self, f"filter_{name}")(rows, value)
        return rows

    def strictly(self, rows: Rows) -> Rows:
        """The rows every filter selects, or FilterRefused naming the first bad value (the API:
        a filter it would leave out silently would answer a question nobody asked)."""
        self.is_valid()
        unknown = sorted(set(self.data) - set(self.fields))
        if unknown:
            raise FilterRefused(f"no such filter; use one of {', '.join(self.fields)}", unknown[0])
        for name, errors in self.errors.items():
            raise FilterRefused(" ".join(errors), name)
        return self.apply(rows)


def choices_of(rows: QuerySet[Any], field: str) -> list[tuple[str, str]]:
    """The distinct non-empty values of a column, as choices."""
    values = rows.values_list(field, flat=True).distinct().order_by(field)
    return [(value, value) for value in values if value]


def encode_cursor(list_name: str, key: Sequence[Any]) -> str:
    """An opaque, URL-safe cursor for `list_name` holding `key` (JSON values: where to go on)."""
    return signing.dumps([list_name, list(key)], salt=CURSOR_SALT, compress=True)


def decode_cursor(list_name: str, text: str) -> list[Any]:
    """The key a cursor of `list_name` holds, or FilterRefused naming `cursor`."""
    try:
        name, key = signing.loads(text, salt=CURSOR_SALT)
    except (signing.BadSignature, ValueError, TypeError):
        raise FilterRefused(
            "is not a cursor Berth gave (changed or cut short); leave it out to start from the "
            "first page, or pass next_cursor exactly as it was answered",
            "cursor",
        ) from None
    if name != list_name:
        raise FilterRefused(
            f"is a cursor of the {name} list, not of the {list_name} list; pass the "
            f"next_cursor the {list_name} list answered",
            "cursor",
        )
    return list(key)
