"""The API's shared vocabulary, used by every app's router: the error body, strict input schemas
and text that PostgreSQL can store (GiB, like every unit, is placement/words.py's).
console/api_v1.py assembles the routers into the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import AfterValidator, BeforeValidator, ConfigDict


class ErrorOut(Schema):
    detail: str = Field(description="what is wrong, starting with the field it is about")
    field: str = Field("", description="the field to change; empty when it is not about one")


def error_body(message: str, field: str = "") -> dict[str, str]:
    return {"detail": f"{field}: {message}" if field else message, "field": field}


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


# The schema states the NUL (a JSON Schema pattern cannot state a lone surrogate, which no JSON
# generator sends unless asked: it is refused all the same).
NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, AfterValidator(storable_text), Field(json_schema_extra={"pattern": NO_NUL})]


def whole_number(value: Any) -> Any:
    # JSON Schema's integer is any number without a fraction, 2.0 as well as 2: pydantic's strict
    # int refuses 2.0, and its lax one takes "2" and true too. Only numbers, then, 2.0 as 2.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("Input should be a valid integer")  # as pydantic words it
    return value


Whole = Annotated[int, BeforeValidator(whole_number), Field(strict=False)]


class StrictSchema(Schema):
    # JSON types as written (no "3" for 3, no true for 1) and no unknown fields, so that a typo
    # is an error rather than a default silently used.
    model_config = ConfigDict(strict=True, extra="forbid")


def ruled(check: Callable[[Any], Any], refusals: tuple[type[Exception], ...]) -> AfterValidator:
    """A value checked by the rule its action keeps, as the request is read (the schema states
    that rule from the same constants): what it refuses comes back in its words as a 422
    naming the field, like any value the schema does not allow."""

    def run(value: Any) -> Any:
        try:
            check(value)
        except refusals as refused:
            raise ValueError(getattr(refused, "message", str(refused))) from None
        return value

    return AfterValidator(run)
