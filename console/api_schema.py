"""The API's shared vocabulary, used by every app's router: the error body, strict input schemas
and text that PostgreSQL can store (GiB, like every unit, is placement/words.py's).
console/api_v1.py assembles the routers into the API."""

from __future__ import annotations

from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import AfterValidator, ConfigDict


class ErrorOut(Schema):
    detail: str = Field(description="what is wrong, starting with the field it is about")
    field: str = Field("", description="the field to change; empty when it is not about one")


class InvalidForModel(Exception):
    """Settings that are well-formed but impossible for this model (placement said why): 422."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


ERRORS: dict[int | str, Any] = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    422: ErrorOut,
}


def storable_text(value: str) -> str:
    # PostgreSQL refuses NUL in text and UTF-8 cannot encode a lone surrogate: refuse both here
    # rather than fail at the database.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    return value


Text = Annotated[str, AfterValidator(storable_text)]


class StrictSchema(Schema):
    # JSON types as written (no "3" for 3, no true for 1) and no unknown fields, so that a typo
    # is an error rather than a default silently used.
    model_config = ConfigDict(strict=True, extra="forbid")
