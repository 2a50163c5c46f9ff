"""BerthClient and AsyncBerthClient: the console's API from Python.

    from berth_sdk import BerthClient

    with BerthClient(base_url="https://berth.example.com", api_key="berth_…") as client:
        deployment_id = client.serving.deploy_model(repo_id="Qwen/Qwen3-0.6B")
        reply = client.openai().chat.completions.create(model=…, messages=[…])

The URL and key come from the arguments, else BERTH_URL and BERTH_API_KEY, else `berth login`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from datetime import date, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from berth_sdk import _calls as calls
from berth_sdk import config
from berth_sdk._http import AsyncTransport, RetryPolicy, Transport
from berth_sdk._paging import async_pages, pages
from berth_sdk.catalog import AsyncModels, Models
from berth_sdk.clusters import AsyncClusters, Clusters
from berth_sdk.config_files import AsyncConfigFiles, ConfigFiles
from berth_sdk.errors import BerthError
from berth_sdk.quotas import AsyncQuotas, Quotas
from berth_sdk.results import CostReport, Identity, UsageRow
from berth_sdk.serving import AsyncServing, Serving

if TYPE_CHECKING:
    import openai

GATEWAY_PORT = 8001  # the gateway's port when nothing says otherwise, as the console's own rule


def derived_gateway_url(base_url: str) -> str:
    """The gateway on its default port of the console's host: what the console itself answers
    when neither BERTH_GATEWAY_URL nor its port is set."""
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{GATEWAY_PORT}/v1"


def gateway_or_none(gateway_url: str | None) -> str | None:
    given = gateway_url or os.environ.get(config.GATEWAY_VARIABLE) or None
    return given.rstrip("/") if given else None


def openai_module() -> Any:
    try:
        import openai
    except ImportError:
        raise BerthError(
            "client.openai() needs the openai package: pip install 'berth-sdk[openai]'"
        ) from None
    return openai


class BerthClient:
    """The console's API: `serving` (deployments, estimates, fit checks), `models` (the
    catalog), `clusters`, `quotas`, `config_files` (export and apply), `me()`, `usage()`, and
    `openai()` for the gateway.

    `timeout` is each request's limit in seconds (or an httpx.Timeout); safe requests are
    retried up to `max_retries` times on connection errors, timeouts, 502, 503 and 429.
    `gateway_url` (or BERTH_GATEWAY_URL) is where openai() sends chat; by default, where the
    console says its gateway is.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        gateway_url: str | None = None,
        timeout: float | httpx.Timeout | None = 30.0,
        max_retries: int = 3,
    ) -> None:
        login = config.resolve(base_url, api_key)
        self.base_url = login.url
        self._api_key = login.api_key
        self._gateway_url = gateway_or_none(gateway_url)
        self._transport = Transport(
            login.url, login.api_key, timeout, RetryPolicy(max_retries=max_retries)
        )
        self.models = Models(self._transport)
        self.clusters = Clusters(self._transport)
        self.serving = Serving(self._transport, self.models, self.clusters)
        self.quotas = Quotas(self._transport)
        self.config_files = ConfigFiles(self._transport)

    def __repr__(self) -> str:
        return f"BerthClient(base_url={self.base_url!r})"  # never the key

    def me(self) -> Identity:
        """Who the API key acts as, and with which roles."""
        return Identity.from_api(self._transport.send(calls.me()))

    def usage(
        self,
        group_by: str | None = None,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        bucket: str | None = None,
    ) -> Iterator[UsageRow]:
        """Requests, tokens and mean time to first token through the gateway, oldest first:
        per `group_by` ("team", the default; "key", "user", "deployment") and `bucket` ("day",
        the default, or "hour"), from `since` to before `until` (a time in UTC or a date, which
        as `until` includes its day; the last week when left out). Your operated teams' usage
        (everyone's, for platform admins)."""
        request = calls.usage(group_by, since, until, bucket)
        return pages(self._transport, request, UsageRow.from_api)

    def cost(
        self,
        group_by: str | None = None,
        *,
        since: date | str | None = None,
        until: date | str | None = None,
    ) -> CostReport:
        """What the GPU (and CPU) room deployments held cost at the admin's prices, per
        `group_by` ("deployment", the default, or "team") and UTC day, from the day `since` to
        the day `until`, both included (the last week when left out), costliest first. Your
        operated teams' (everyone's, for platform admins)."""
        return CostReport.from_api(self._transport.send(calls.cost(group_by, since, until)))

    def gateway_url(self) -> str:
        """The OpenAI-compatible gateway's address, ending in /v1."""
        if self._gateway_url is None:
            said = self.me().gateway_url
            self._gateway_url = said.rstrip("/") if said else derived_gateway_url(self.base_url)
        return self._gateway_url

    def openai(self, **options: Any) -> openai.OpenAI:
        """An openai.OpenAI client for Berth's gateway with this client's key: a request's
        `model` is a deployment's chat name or name. Options go to openai.OpenAI."""
        module = openai_module()
        client: openai.OpenAI = module.OpenAI(
            base_url=self.gateway_url(), api_key=self._api_key, **options
        )
        return client

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> BerthClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncBerthClient:
    """BerthClient's surface, asynchronous: every call is awaited, every list is iterated
    with `async for`, and openai() gives an openai.AsyncOpenAI."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        gateway_url: str | None = None,
        timeout: float | httpx.Timeout | None = 30.0,
        max_retries: int = 3,
    ) -> None:
        login = config.resolve(base_url, api_key)
        self.base_url = login.url
        self._api_key = login.api_key
        self._gateway_url = gateway_or_none(gateway_url)
        self._transport = AsyncTransport(
            login.url, login.api_key, timeout, RetryPolicy(max_retries=max_retries)
        )
        self.models = AsyncModels(self._transport)
        self.clusters = AsyncClusters(self._transport)
        self.serving = AsyncServing(self._transport, self.models, self.clusters)
        self.quotas = AsyncQuotas(self._transport)
        self.config_files = AsyncConfigFiles(self._transport)

    def __repr__(self) -> str:
        return f"AsyncBerthClient(base_url={self.base_url!r})"

    async def me(self) -> Identity:
        return Identity.from_api(await self._transport.send(calls.me()))

    async def usage(
        self,
        group_by: str | None = None,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        bucket: str | None = None,
    ) -> AsyncIterator[UsageRow]:
        """Requests, tokens and mean time to first token; see BerthClient.usage."""
        request = calls.usage(group_by, since, until, bucket)
        async for row in async_pages(self._transport, request, UsageRow.from_api):
            yield row

    async def cost(
        self,
        group_by: str | None = None,
        *,
        since: date | str | None = None,
        until: date | str | None = None,
    ) -> CostReport:
        """The cost of the room deployments held; see BerthClient.cost."""
        return CostReport.from_api(await self._transport.send(calls.cost(group_by, since, until)))

    async def gateway_url(self) -> str:
        """The OpenAI-compatible gateway's address, ending in /v1."""
        if self._gateway_url is None:
            said = (await self.me()).gateway_url
            self._gateway_url = said.rstrip("/") if said else derived_gateway_url(self.base_url)
        return self._gateway_url

    async def openai(self, **options: Any) -> openai.AsyncOpenAI:
        """An openai.AsyncOpenAI client for Berth's gateway with this client's key."""
        module = openai_module()
        client: openai.AsyncOpenAI = module.AsyncOpenAI(
            base_url=await self.gateway_url(), api_key=self._api_key, **options
        )
        return client

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncBerthClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
