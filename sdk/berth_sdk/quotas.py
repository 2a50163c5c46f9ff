"""client.quotas: limits on an API key, a team or a deployment, held by every gateway process.

A quota sets any of tokens per day, tokens per month (prompt + completion, UTC windows),
requests per minute (the last 60 s) and tokens per minute. Over one, the gateway answers 429
with Retry-After and words naming the quota. A shadow quota only counts what it would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth_sdk._http import AsyncTransport, Request, Transport
from berth_sdk.results import Json

LIMITS = ("tokens_per_day", "tokens_per_month", "requests_per_minute", "tokens_per_minute")


@dataclass(frozen=True)
class Quota:
    id: int
    subject: str  # in words: 'team red', 'deployment red-qwen', 'API key "ci"'
    api_key: int | None
    team: str | None
    deployment: str | None
    tokens_per_day: int | None
    tokens_per_month: int | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    shadow: bool
    use: dict[str, dict[str, int]]  # per limit set: used (this window), shadow_refusals

    @classmethod
    def from_api(cls, data: Json) -> Quota:
        return cls(
            id=int(data["id"]),
            subject=str(data["subject"]),
            api_key=data.get("api_key"),
            team=data.get("team"),
            deployment=data.get("deployment"),
            tokens_per_day=data.get("tokens_per_day"),
            tokens_per_month=data.get("tokens_per_month"),
            requests_per_minute=data.get("requests_per_minute"),
            tokens_per_minute=data.get("tokens_per_minute"),
            shadow=bool(data.get("shadow")),
            use=dict(data.get("use") or {}),
        )


def listed() -> Request:
    return Request("GET", "/quotas")


def setting(
    api_key: int | None, team: str | None, deployment: str | None, shadow: bool, **limits: Any
) -> Request:
    body: dict[str, Any] = {"api_key": api_key, "team": team, "deployment": deployment}
    return Request("POST", "/quotas", body={**body, **limits, "shadow": shadow})


def removal(quota_id: int) -> Request:
    return Request("DELETE", f"/quotas/{int(quota_id)}")


class Quotas:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def list(self) -> list[Quota]:
        """The quotas on your keys, your teams and their deployments, with what is used."""
        return [Quota.from_api(item) for item in self._transport.send(listed())["items"]]

    def set(
        self,
        *,
        api_key: int | None = None,
        team: str | None = None,
        deployment: str | None = None,
        tokens_per_day: int | None = None,
        tokens_per_month: int | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        shadow: bool = False,
    ) -> Quota:
        """Set the quota of one key (by id), team or deployment (by name); it replaces the
        quota there was. Limits left out are not limited."""
        request = setting(
            api_key, team, deployment, shadow,
            tokens_per_day=tokens_per_day, tokens_per_month=tokens_per_month,
            requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
        )  # fmt: skip
        return Quota.from_api(self._transport.send(request))

    def remove(self, quota_id: int) -> None:
        self._transport.send(removal(quota_id))


class AsyncQuotas:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def list(self) -> list[Quota]:
        """The quotas on your keys, your teams and their deployments; see Quotas.list."""
        return [Quota.from_api(item) for item in (await self._transport.send(listed()))["items"]]

    async def set(
        self,
        *,
        api_key: int | None = None,
        team: str | None = None,
        deployment: str | None = None,
        tokens_per_day: int | None = None,
        tokens_per_month: int | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        shadow: bool = False,
    ) -> Quota:
        """Set the quota of one key, team or deployment; see Quotas.set."""
        request = setting(
            api_key, team, deployment, shadow,
            tokens_per_day=tokens_per_day, tokens_per_month=tokens_per_month,
            requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
        )  # fmt: skip
        return Quota.from_api(await self._transport.send(request))

    async def remove(self, quota_id: int) -> None:
        await self._transport.send(removal(quota_id))
