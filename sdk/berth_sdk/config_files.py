"""client.config_files: configuration as code. export() writes deployments as a file's
document; apply() makes a document true, or with dry_run only says what it would do, as an
ApplyPlan; apply_schema() is the document's JSON Schema (what `berth apply -f` reads).

Carrying a plan out is all or nothing: an item that would not fit or is refused and nothing is
done, raised as ApplyRefusedError with the plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from berth_sdk._calls import given
from berth_sdk._http import AsyncTransport, Request, Transport
from berth_sdk.errors import ApplyRefusedError, BerthAPIError, ConflictError
from berth_sdk.results import Json, RevisionChange

# What each item of a plan does, in the order the console counts them.
ACTIONS = ("create", "update", "unchanged", "delete", "would_not_fit", "refused")


@dataclass(frozen=True)
class PlanItem:
    """One deployment's part of a plan: its `action` (one of ACTIONS), an update's `changes`,
    and `reason`: why it would not fit or is refused, or what waits for room."""

    name: str
    action: str
    changes: list[RevisionChange]
    reason: str

    @classmethod
    def from_api(cls, data: Json) -> PlanItem:
        return cls(
            name=str(data["name"]),
            action=str(data["action"]),
            changes=[RevisionChange.from_api(change) for change in data.get("changes", [])],
            reason=str(data.get("reason", "")),
        )


@dataclass(frozen=True)
class ApplyPlan:
    """What an apply does (`applied`: carried out) or would do (`dry_run`), item by item, and
    how many items of each action."""

    dry_run: bool
    applied: bool
    counts: dict[str, int]
    items: list[PlanItem]

    @classmethod
    def from_api(cls, data: Json) -> ApplyPlan:
        return cls(
            dry_run=bool(data.get("dry_run")),
            applied=bool(data.get("applied")),
            counts={str(name): int(count) for name, count in data.get("counts", {}).items()},
            items=[PlanItem.from_api(item) for item in data.get("items", [])],
        )


def exporting(names: Iterable[str] | None, team: str | None) -> Request:
    params: dict[str, str | list[str]] = {**given(team=team)}
    if names:
        params["name"] = list(names)
    return Request("GET", "/export", params)


def applying(document: Json, dry_run: bool, prune: bool) -> Request:
    body = {"document": dict(document), "dry_run": dry_run, "prune": prune}
    return Request("POST", "/apply", body=body)


def schema() -> Request:
    return Request("GET", "/apply/schema")


def refusal(error: ConflictError) -> BerthAPIError:
    """An apply's 409 as the ApplyRefusedError carrying its plan (any other 409 as it is)."""
    body = error.body
    if not (isinstance(body, dict) and isinstance(body.get("plan"), dict)):
        return error
    return ApplyRefusedError(
        ApplyPlan.from_api(body["plan"]), error.message, error.method, error.url
    )


class ConfigFiles:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def export(self, names: Iterable[str] | None = None, team: str | None = None) -> dict[str, Any]:
        """The document of the deployments named, or of a team's, or of all you may see."""
        document: dict[str, Any] = self._transport.send(exporting(names, team))
        return document

    def apply(self, document: Json, *, dry_run: bool = False, prune: bool = False) -> ApplyPlan:
        """Make the document's deployments true (dry_run: only the plan); prune: delete the
        deployments of its teams that it does not name. Raises ApplyRefusedError, with the
        plan, when an item would not fit or is refused: then nothing was done."""
        try:
            return ApplyPlan.from_api(self._transport.send(applying(document, dry_run, prune)))
        except ConflictError as error:
            raise refusal(error) from None

    def apply_schema(self) -> dict[str, Any]:
        """The JSON Schema of the document apply() reads and export() writes."""
        found: dict[str, Any] = self._transport.send(schema())
        return found


class AsyncConfigFiles:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def export(
        self, names: Iterable[str] | None = None, team: str | None = None
    ) -> dict[str, Any]:
        """The document of the deployments named; see ConfigFiles.export."""
        document: dict[str, Any] = await self._transport.send(exporting(names, team))
        return document

    async def apply(
        self, document: Json, *, dry_run: bool = False, prune: bool = False
    ) -> ApplyPlan:
        """Make the document's deployments true; see ConfigFiles.apply."""
        try:
            return ApplyPlan.from_api(
                await self._transport.send(applying(document, dry_run, prune))
            )
        except ConflictError as error:
            raise refusal(error) from None

    async def apply_schema(self) -> dict[str, Any]:
        """The JSON Schema of the document; see ConfigFiles.apply_schema."""
        found: dict[str, Any] = await self._transport.send(schema())
        return found
