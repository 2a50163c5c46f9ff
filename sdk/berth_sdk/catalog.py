"""client.models: the models the console knows, added by repository id, downloaded, tried again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from berth_sdk import _calls as calls
from berth_sdk._calls import ModelRef
from berth_sdk._http import AsyncTransport, Transport
from berth_sdk._paging import async_pages, pages
from berth_sdk.results import Model


def model_filters(
    search: str | None,
    family: str | None,
    size: str | None,
    task: str | None,
    format: str | None,
    license: str | None,
    gated: bool | None,
    sort: str | None,
) -> dict[str, Any]:
    return {
        "q": search,
        "family": family,
        "size": size,
        "task": task,
        "format": format,
        "license": license,
        "gated": gated,
        "sort": sort,
    }


class Models:
    """The catalog, as the marketplace shows it."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def list(
        self,
        search: str | None = None,
        *,
        family: str | None = None,
        size: str | None = None,
        task: str | None = None,
        format: str | None = None,
        license: str | None = None,
        gated: bool | None = None,
        sort: str | None = None,
    ) -> Iterator[Model]:
        """Every model matching the marketplace's filters (size: small, medium, large; format:
        safetensors, gguf; sort: name, size, family, "-" first reverses), page after page."""
        filters = model_filters(search, family, size, task, format, license, gated, sort)
        return pages(self._transport, calls.models(filters), Model.from_api)

    def get(self, model: ModelRef) -> Model:
        """One model, by catalog id or repository id (e.g. "Qwen/Qwen3-8B")."""
        if isinstance(model, Model):
            model = model.id
        if isinstance(model, int):
            return Model.from_api(self._transport.send(calls.model_by_id(model)))
        return calls.picked_model(model, self._transport.send(calls.model_by_repo(model)))

    def add(self, repo_id: str, *, revision: str | None = None, team: str | None = None) -> Model:
        """Add a model of the Hugging Face hub to the catalog by its repository id (operators
        of any team). revision: a branch, tag or commit (main when left out); team: one you
        operate, whose Hugging Face token reads a gated repository."""
        return Model.from_api(self._transport.send(calls.add_model(repo_id, revision, team)))

    def download(
        self,
        model: ModelRef,
        variant: str,
        *,
        revision: str | None = None,
        team: str | None = None,
    ) -> Model:
        """Start downloading a variant's files to this server; it goes on in the background
        (the variant's `download` tells how far). team: one you operate, whose Hugging Face
        token reads a gated repository."""
        pk = self._pk(model)
        return Model.from_api(
            self._transport.send(calls.download_model(pk, variant, revision, team))
        )

    def delete_files(self, model: ModelRef, variant: str) -> Model:
        """Delete a variant's files from this server (platform admins); refused while a
        deployment uses them or their download runs."""
        request = calls.delete_files(self._pk(model), variant)
        return Model.from_api(self._transport.send(request))

    def retry(self, model: ModelRef, variant: str) -> Model:
        """Try a failed download of a variant again."""
        request = calls.model_action(self._pk(model), "retry", variant)
        return Model.from_api(self._transport.send(request))

    def _pk(self, model: ModelRef) -> int:
        if isinstance(model, Model):
            return model.id
        return model if isinstance(model, int) else self.get(model).id


class AsyncModels:
    """The catalog, as the marketplace shows it (asynchronous)."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    def list(
        self,
        search: str | None = None,
        *,
        family: str | None = None,
        size: str | None = None,
        task: str | None = None,
        format: str | None = None,
        license: str | None = None,
        gated: bool | None = None,
        sort: str | None = None,
    ) -> AsyncIterator[Model]:
        """Every model matching the marketplace's filters, page after page."""
        filters = model_filters(search, family, size, task, format, license, gated, sort)
        return async_pages(self._transport, calls.models(filters), Model.from_api)

    async def get(self, model: ModelRef) -> Model:
        """One model, by catalog id or repository id (e.g. "Qwen/Qwen3-8B")."""
        if isinstance(model, Model):
            model = model.id
        if isinstance(model, int):
            return Model.from_api(await self._transport.send(calls.model_by_id(model)))
        return calls.picked_model(model, await self._transport.send(calls.model_by_repo(model)))

    async def add(
        self, repo_id: str, *, revision: str | None = None, team: str | None = None
    ) -> Model:
        """Add a model of the Hugging Face hub to the catalog; see Models.add."""
        return Model.from_api(await self._transport.send(calls.add_model(repo_id, revision, team)))

    async def download(
        self,
        model: ModelRef,
        variant: str,
        *,
        revision: str | None = None,
        team: str | None = None,
    ) -> Model:
        """Start downloading a variant's files to this server; see Models.download."""
        request = calls.download_model(await self._pk(model), variant, revision, team)
        return Model.from_api(await self._transport.send(request))

    async def delete_files(self, model: ModelRef, variant: str) -> Model:
        """See Models.delete_files."""
        request = calls.delete_files(await self._pk(model), variant)
        return Model.from_api(await self._transport.send(request))

    async def retry(self, model: ModelRef, variant: str) -> Model:
        """Try a failed download of a variant again."""
        request = calls.model_action(await self._pk(model), "retry", variant)
        return Model.from_api(await self._transport.send(request))

    async def _pk(self, model: ModelRef) -> int:
        if isinstance(model, Model):
            return model.id
        return model if isinstance(model, int) else (await self.get(model)).id
