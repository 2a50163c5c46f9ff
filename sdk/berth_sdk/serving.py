"""client.serving: host models, wait for them, watch, change and remove deployments, read their
revisions and roll them back, and estimate or check the fit of a model before hosting it.

A deployment is named by its id, its name, or a Deployment read before; a model by its catalog
id or its repository id; a cluster by its id or its name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from berth_sdk import _calls as calls
from berth_sdk._calls import ClusterRef, DeploymentRef, ModelRef, Size
from berth_sdk._http import AsyncTransport, Transport
from berth_sdk._paging import async_pages, pages
from berth_sdk.catalog import AsyncModels, Models
from berth_sdk.clusters import AsyncClusters, Clusters
from berth_sdk.errors import DeploymentTimeoutError
from berth_sdk.results import (
    Autoscaling,
    Cluster,
    Deployment,
    DeploymentStatus,
    Estimate,
    Event,
    FitCheck,
    HostedDeployment,
    LogLine,
    Model,
    Revision,
    RevisionChange,
    changes_of,
)

OnUpdate = Callable[[Deployment], None]


def one_model(model_id: int | None, repo_id: str | None) -> int | str:
    """The model named by exactly one of the two."""
    if repo_id is not None and model_id is None:
        return repo_id
    if model_id is not None and repo_id is None:
        return model_id
    raise ValueError(
        "name the model once: model_id= (its catalog id) or repo_id= (e.g. Qwen/Qwen3-8B)"
    )


def cluster_name(cluster: ClusterRef) -> str | None:
    """The name a cluster reference gives without asking the console (None for an id)."""
    if isinstance(cluster, str):
        return cluster
    return cluster.name if isinstance(cluster, Cluster) else None


def log_filters(
    level: str | None, stream: str | None, machine: str | None, q: str | None
) -> dict[str, str | None]:
    return {"level": level, "stream": stream, "machine": machine, "q": q}


def event_filters(
    deployment_name: str | None,
    team: str | None,
    actor: str | None,
    kind: str | None,
    since: datetime | str | None,
    until: datetime | str | None,
    order: str | None,
) -> dict[str, Any]:
    return {
        "object": deployment_name,
        "team": team,
        "actor": actor,
        "kind": kind,
        "since": since,
        "until": until,
        "order": order,
    }


class Serving:
    """Deployments: host, wait, read, list, scale, stop, start, retry, delete, check, logs, events,
    revisions and rollback; and the memory estimate and fit check of a model."""

    def __init__(self, transport: Transport, models: Models, clusters: Clusters) -> None:
        self._transport = transport
        self._models = models
        self._clusters = clusters

    # --- hosting ---------------------------------------------------------------------------

    def deploy_model(
        self,
        model_id: int | None = None,
        repo_id: str | None = None,
        variant: str | None = None,
        cluster: str | None = None,
        copies: int = 1,
        accelerators_per_copy: Size | None = None,
        chat_name: str | None = None,
        engine_settings: Mapping[str, Any] | None = None,
        name: str | None = None,
        wait: bool = True,
        timeout_seconds: float = 3600,
        poll_interval_seconds: float = 5.0,
        *,
        team: str | None = None,
        revision: str | None = None,
        autoscaling: Autoscaling | None = None,
        on_update: OnUpdate | None = None,
        allow_moves: bool = False,
        routing: str | None = None,
        comment: str = "",
    ) -> int:
        """Host a model and return the deployment's id.

        The model is named by `model_id` (its catalog id) or `repo_id`. What is left None
        (variant, cluster, size, name, team) the console chooses, as its wizard does: a variant
        that runs and fits (one already on this server first), the first cluster with room,
        the smallest usual size that holds one copy with its context there (so that models
        hosted the same way share a machine), a unique name. With `wait` (the default) this
        blocks until the deployment is DEPLOYED, raising DeploymentFailedError if it fails
        (FAILED, ERROR, MUST_REDOWNLOAD) and DeploymentTimeoutError (a TimeoutError) after
        `timeout_seconds`; `on_update` is called with the deployment at each poll. Without, it
        returns once the console has accepted it.
        With `allow_moves`, copies of other deployments may move to make room (each started at
        its new place before the old one stops), as the fit check's moves show. `routing` is
        how the gateway picks a copy: "least_loaded" (the console's default), "prefix" or
        "session" (see set_routing). `comment` says why, kept with its first revision.
        """
        hosted = self.host(
            model_id,
            repo_id,
            variant=variant,
            cluster=cluster,
            copies=copies,
            accelerators_per_copy=accelerators_per_copy,
            chat_name=chat_name,
            engine_settings=engine_settings,
            name=name,
            team=team,
            revision=revision,
            autoscaling=autoscaling,
            allow_moves=allow_moves,
            routing=routing,
            comment=comment,
        )
        if wait:
            self.wait_deployment_ready(
                hosted.id, timeout_seconds, poll_interval_seconds, on_update=on_update
            )
        return hosted.id

    def host(
        self,
        model_id: int | None = None,
        repo_id: str | None = None,
        *,
        variant: str | None = None,
        cluster: str | None = None,
        copies: int = 1,
        accelerators_per_copy: Size | None = None,
        chat_name: str | None = None,
        engine_settings: Mapping[str, Any] | None = None,
        name: str | None = None,
        team: str | None = None,
        revision: str | None = None,
        autoscaling: Autoscaling | None = None,
        allow_moves: bool = False,
        routing: str | None = None,
        comment: str = "",
    ) -> HostedDeployment:
        """Ask the console to host a model, without waiting; the answer says what it chose
        for what was left out, and why."""
        model = one_model(model_id, repo_id)
        repo_id = model if isinstance(model, str) else self._models.get(model).repo_id
        request = calls.host(
            repo_id,
            variant=variant,
            cluster=cluster,
            copies=copies,
            accelerators_per_copy=accelerators_per_copy,
            chat_name=chat_name,
            engine_settings=engine_settings,
            name=name,
            team=team,
            revision=revision,
            autoscaling=autoscaling,
            allow_moves=allow_moves,
            routing=routing,
            comment=comment,
        )
        return HostedDeployment.from_api(self._transport.send(request))

    def wait_deployment_ready(
        self,
        deployment: DeploymentRef,
        timeout_seconds: float = 3600,
        poll_interval_seconds: float = 5.0,
        *,
        on_update: OnUpdate | None = None,
    ) -> Deployment:
        """Poll until the deployment is DEPLOYED and return it; DeploymentFailedError when it
        fails (or is stopped), DeploymentTimeoutError after `timeout_seconds`."""
        calls.check_wait(timeout_seconds, poll_interval_seconds)
        pk = self._id(deployment)
        deadline = time.monotonic() + timeout_seconds
        while True:
            current = self.get_deployment(pk)
            if on_update is not None:
                on_update(current)
            if calls.settled(current):
                return current
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeploymentTimeoutError(pk, timeout_seconds, current.state)
            time.sleep(min(poll_interval_seconds, left))

    # --- reading ---------------------------------------------------------------------------

    def get_deployment(self, deployment: DeploymentRef) -> Deployment:
        return Deployment.from_api(self._transport.send(calls.deployment(self._id(deployment))))

    def get_deployment_status(self, deployment: DeploymentRef) -> DeploymentStatus:
        return self.get_deployment(deployment).state

    def list_deployments(
        self,
        state: str | None = None,
        cluster: ClusterRef | None = None,
        model: ModelRef | None = None,
        q: str | None = None,
        sort: str | None = None,
    ) -> Iterator[Deployment]:
        """The deployments of your teams, page after page. state: a state or a group (active,
        serving, failed, stopped); q: text in the name or chat name; sort: name, created,
        state, model, cluster, team ("-" first reverses)."""
        cluster_id = None if cluster is None else self._clusters.id_of(cluster)
        model_id = None if model is None else self._model(model).id
        request = calls.deployments(state, cluster_id, model_id, q, sort)
        return pages(self._transport, request, Deployment.from_api)

    def logs(
        self,
        deployment: DeploymentRef,
        after: int | None = None,
        follow: bool = False,
        *,
        level: str | None = None,
        stream: str | None = None,
        machine: str | None = None,
        q: str | None = None,
        poll_interval_seconds: float = 1.0,
    ) -> Iterator[LogLine]:
        """The deployment's log lines, oldest first, after the line `after` (a seq) if given.
        With `follow` it never ends: it waits for new lines and yields them as they come.
        level: DEBUG, INFO, WARNING or ERROR (and above); stream: engine or serving."""
        pk = self._id(deployment)
        filters = log_filters(level, stream, machine, q)
        while True:
            data = self._transport.send(calls.log_lines(pk, after, filters))
            for item in data["items"]:
                line = LogLine.from_api(item)
                after = line.seq
                yield line
            if data.get("next_cursor"):
                continue
            if not follow:
                return
            time.sleep(poll_interval_seconds)

    def events(
        self,
        deployment: DeploymentRef | None = None,
        *,
        team: str | None = None,
        actor: str | None = None,
        kind: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        order: str | None = None,
    ) -> Iterator[Event]:
        """What happened in your teams, newest first (order="oldest" for the other way),
        about one deployment when one is named; since/until: a time in UTC or a date."""
        name = None if deployment is None else self._name(deployment)
        filters = event_filters(name, team, actor, kind, since, until, order)
        return pages(self._transport, calls.events(filters), Event.from_api)

    # --- changing --------------------------------------------------------------------------

    # Each change below takes `comment`: why it is made, kept with the revision it makes.

    def scale(
        self,
        deployment: DeploymentRef,
        copies: int,
        accelerators_per_copy: Size | None = None,
        allow_moves: bool = False,
        *,
        comment: str = "",
    ) -> Deployment:
        """Run `copies` copies (0 to 1000), each of `accelerators_per_copy` (unchanged: None);
        with `allow_moves`, copies of other deployments may move to make room for them."""
        pk = self._id(deployment)
        request = calls.scale(pk, copies, accelerators_per_copy, allow_moves, comment)
        return Deployment.from_api(self._transport.send(request))

    def set_autoscaling(
        self, deployment: DeploymentRef, autoscaling: Autoscaling | None, *, comment: str = ""
    ) -> Deployment:
        """Let the deployment scale itself within `autoscaling`'s bounds (None: back to the
        number it has now, fixed). Copies that serve keep serving: only those outside new bounds
        start or leave. scale() with a fixed number also turns autoscaling off."""
        request = calls.set_autoscaling(self._id(deployment), autoscaling, comment)
        return Deployment.from_api(self._transport.send(request))

    def set_routing(
        self, deployment: DeploymentRef, routing: str, *, comment: str = ""
    ) -> Deployment:
        """How the gateway picks a copy for each request: "least_loaded" (the fewest in
        flight), "prefix" (the copy that last served the prompt's beginning, which its engine
        still caches) or "session" (the copy the request's session used: its X-Berth-Session
        header, else the OpenAI `user`). Both of the latter give way to load."""
        request = calls.set_routing(self._id(deployment), routing, comment)
        return Deployment.from_api(self._transport.send(request))

    def set_queue(
        self,
        deployment: DeploymentRef,
        max_waiting: int,
        queue_wait_s: int | None = None,
        *,
        comment: str = "",
    ) -> Deployment:
        """When every copy is full (its engine's max_num_seqs in flight): up to `max_waiting`
        requests wait at each gateway process (0: none, the engines queue them), each for
        `queue_wait_s` (None: the reply wait); past the queue a 429, past the wait a 503."""
        request = calls.set_queue(self._id(deployment), max_waiting, queue_wait_s, comment)
        return Deployment.from_api(self._transport.send(request))

    def stop_deployment(self, deployment: DeploymentRef) -> Deployment:
        return self._act(deployment, "stop")

    def start_deployment(self, deployment: DeploymentRef) -> Deployment:
        return self._act(deployment, "start")

    def check_now(self, deployment: DeploymentRef) -> Deployment:
        """Look at it at once; a FAILED deployment starts over."""
        return self._act(deployment, "check")

    def retry_deployment(self, deployment: DeploymentRef) -> Deployment:
        """Try a FAILED deployment again from the start (start_deployment refuses a failed one;
        any other state is refused with BerthAPIError, status 400)."""
        return self._act(deployment, "retry")

    def delete_deployment(self, deployment: DeploymentRef) -> None:
        """Stop every copy, then remove the deployment; the model stays on the server."""
        self._transport.send(calls.delete(self._id(deployment)))

    # --- revisions -------------------------------------------------------------------------

    def revisions(self, deployment: DeploymentRef) -> list[Revision]:
        """Every change of what the deployment is asked to be, newest first: who made it,
        when, why, and what it changed from the revision before."""
        answer = self._transport.send(calls.revisions(self._id(deployment)))
        return calls.listed_revisions(answer)

    def revision(self, deployment: DeploymentRef, number: int) -> Revision:
        request = calls.revision(self._id(deployment), number)
        return Revision.from_api(self._transport.send(request))

    def compare_revisions(
        self, deployment: DeploymentRef, number: int, other: int
    ) -> list[RevisionChange]:
        """What changes from revision `number` to revision `other` (either may be the older)."""
        request = calls.compare_revisions(self._id(deployment), number, other)
        return changes_of(self._transport.send(request))

    def roll_back(self, deployment: DeploymentRef, revision: int, comment: str = "") -> Deployment:
        """Make the deployment what revision `revision` asked, as a new revision (its
        `restores`); where that changes what the copies run, new copies replace the old ones
        make-before-break. A revision it has not, or the one it is now: BerthAPIError, 400."""
        request = calls.roll_back(self._id(deployment), revision, comment)
        return Deployment.from_api(self._transport.send(request))

    def set_auto_rollback(self, deployment: DeploymentRef, enabled: bool) -> Deployment:
        """Whether a revision whose copies never serve is rolled back, by itself, to the last
        one that served."""
        request = calls.set_auto_rollback(self._id(deployment), enabled)
        return Deployment.from_api(self._transport.send(request))

    # --- placement -------------------------------------------------------------------------

    def estimate(
        self,
        model: ModelRef,
        variant: str | None = None,
        max_model_len: int | None = None,
        *,
        tensor_parallel: int = 1,
        engine_settings: Mapping[str, Any] | None = None,
    ) -> Estimate:
        """The memory one copy needs on each of its GPUs, in parts. The variant left out: the
        first on this server, else the model's first; max_model_len left out: the engine's."""
        repo_id, chosen = self._repo_and_variant(model, variant)
        settings = calls.settings_with(engine_settings, max_model_len)
        request = calls.estimate(repo_id, chosen, settings, tensor_parallel)
        return Estimate.from_api(self._transport.send(request))

    def estimate_model_vram(
        self, model: ModelRef, variant: str | None = None, max_model_len: int | None = None
    ) -> int:
        """The bytes of GPU memory one copy of the model needs (see estimate() for the parts)."""
        return self.estimate(model, variant, max_model_len).total_bytes

    def fit_check(
        self,
        model: ModelRef,
        cluster: ClusterRef,
        variant: str | None = None,
        copies: int = 1,
        accelerators_per_copy: Size | None = None,
        *,
        max_model_len: int | None = None,
        engine_settings: Mapping[str, Any] | None = None,
        allow_moves: bool = False,
    ) -> FitCheck:
        """How many copies fit on the cluster now and empty, where they would go, and why the
        others would not (`.reason`); the estimate's parts are in `.estimate`. With
        `allow_moves`, when it does not fit now: `.moves`, the moves of other copies after
        which it would, and `.moves_words`."""
        repo_id, chosen = self._repo_and_variant(model, variant)
        settings = calls.settings_with(engine_settings, max_model_len)
        name = cluster_name(cluster) or self._clusters.get(cluster).name
        request = calls.fit_check(
            repo_id, chosen, name, copies, accelerators_per_copy, settings, allow_moves
        )
        return FitCheck.from_api(self._transport.send(request))

    # --- references ------------------------------------------------------------------------

    def _id(self, deployment: DeploymentRef) -> int:
        if isinstance(deployment, Deployment):
            return deployment.id
        if isinstance(deployment, int):
            return deployment
        return self._named(deployment).id

    def _name(self, deployment: DeploymentRef) -> str:
        if isinstance(deployment, str):
            return deployment
        if isinstance(deployment, Deployment):
            return deployment.name
        return self.get_deployment(deployment).name

    def _named(self, name: str) -> Deployment:
        return calls.picked_deployment(name, self._transport.send(calls.deployment_named(name)))

    def _model(self, model: ModelRef) -> Model:
        return model if isinstance(model, Model) else self._models.get(model)

    def _repo_and_variant(self, model: ModelRef, variant: str | None) -> tuple[str, str]:
        """The repository id and the variant to ask about, reading the model only if needed."""
        if isinstance(model, str) and variant:
            return model, variant
        found = self._model(model)
        return found.repo_id, variant or calls.default_variant(found)

    def _act(self, deployment: DeploymentRef, act: str) -> Deployment:
        request = calls.action(self._id(deployment), act)
        return Deployment.from_api(self._transport.send(request))


class AsyncServing:
    """Deployments, asynchronously: the same calls as Serving, awaited."""

    def __init__(
        self, transport: AsyncTransport, models: AsyncModels, clusters: AsyncClusters
    ) -> None:
        self._transport = transport
        self._models = models
        self._clusters = clusters

    # --- hosting ---------------------------------------------------------------------------

    async def deploy_model(
        self,
        model_id: int | None = None,
        repo_id: str | None = None,
        variant: str | None = None,
        cluster: str | None = None,
        copies: int = 1,
        accelerators_per_copy: Size | None = None,
        chat_name: str | None = None,
        engine_settings: Mapping[str, Any] | None = None,
        name: str | None = None,
        wait: bool = True,
        timeout_seconds: float = 3600,
        poll_interval_seconds: float = 5.0,
        *,
        team: str | None = None,
        revision: str | None = None,
        autoscaling: Autoscaling | None = None,
        on_update: OnUpdate | None = None,
        allow_moves: bool = False,
        routing: str | None = None,
        comment: str = "",
    ) -> int:
        """Host a model and return the deployment's id; see Serving.deploy_model."""
        hosted = await self.host(
            model_id,
            repo_id,
            variant=variant,
            cluster=cluster,
            copies=copies,
            accelerators_per_copy=accelerators_per_copy,
            chat_name=chat_name,
            engine_settings=engine_settings,
            name=name,
            team=team,
            revision=revision,
            autoscaling=autoscaling,
            allow_moves=allow_moves,
            routing=routing,
            comment=comment,
        )
        if wait:
            await self.wait_deployment_ready(
                hosted.id, timeout_seconds, poll_interval_seconds, on_update=on_update
            )
        return hosted.id

    async def host(
        self,
        model_id: int | None = None,
        repo_id: str | None = None,
        *,
        variant: str | None = None,
        cluster: str | None = None,
        copies: int = 1,
        accelerators_per_copy: Size | None = None,
        chat_name: str | None = None,
        engine_settings: Mapping[str, Any] | None = None,
        name: str | None = None,
        team: str | None = None,
        revision: str | None = None,
        autoscaling: Autoscaling | None = None,
        allow_moves: bool = False,
        routing: str | None = None,
        comment: str = "",
    ) -> HostedDeployment:
        """Ask the console to host a model, without waiting; see Serving.host."""
        model = one_model(model_id, repo_id)
        repo_id = model if isinstance(model, str) else (await self._models.get(model)).repo_id
        request = calls.host(
            repo_id,
            variant=variant,
            cluster=cluster,
            copies=copies,
            accelerators_per_copy=accelerators_per_copy,
            chat_name=chat_name,
            engine_settings=engine_settings,
            name=name,
            team=team,
            revision=revision,
            autoscaling=autoscaling,
            allow_moves=allow_moves,
            routing=routing,
            comment=comment,
        )
        return HostedDeployment.from_api(await self._transport.send(request))

    async def wait_deployment_ready(
        self,
        deployment: DeploymentRef,
        timeout_seconds: float = 3600,
        poll_interval_seconds: float = 5.0,
        *,
        on_update: OnUpdate | None = None,
    ) -> Deployment:
        """Poll until the deployment is DEPLOYED; see Serving.wait_deployment_ready."""
        calls.check_wait(timeout_seconds, poll_interval_seconds)
        pk = await self._id(deployment)
        deadline = time.monotonic() + timeout_seconds
        while True:
            current = await self.get_deployment(pk)
            if on_update is not None:
                on_update(current)
            if calls.settled(current):
                return current
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeploymentTimeoutError(pk, timeout_seconds, current.state)
            await asyncio.sleep(min(poll_interval_seconds, left))

    # --- reading ---------------------------------------------------------------------------

    async def get_deployment(self, deployment: DeploymentRef) -> Deployment:
        request = calls.deployment(await self._id(deployment))
        return Deployment.from_api(await self._transport.send(request))

    async def get_deployment_status(self, deployment: DeploymentRef) -> DeploymentStatus:
        return (await self.get_deployment(deployment)).state

    async def list_deployments(
        self,
        state: str | None = None,
        cluster: ClusterRef | None = None,
        model: ModelRef | None = None,
        q: str | None = None,
        sort: str | None = None,
    ) -> AsyncIterator[Deployment]:
        """The deployments of your teams, page after page; see Serving.list_deployments."""
        cluster_id = None if cluster is None else await self._clusters.id_of(cluster)
        model_id = None if model is None else (await self._model(model)).id
        request = calls.deployments(state, cluster_id, model_id, q, sort)
        async for deployment in async_pages(self._transport, request, Deployment.from_api):
            yield deployment

    async def logs(
        self,
        deployment: DeploymentRef,
        after: int | None = None,
        follow: bool = False,
        *,
        level: str | None = None,
        stream: str | None = None,
        machine: str | None = None,
        q: str | None = None,
        poll_interval_seconds: float = 1.0,
    ) -> AsyncIterator[LogLine]:
        """The deployment's log lines, oldest first; with `follow`, new ones as they come."""
        pk = await self._id(deployment)
        filters = log_filters(level, stream, machine, q)
        while True:
            data = await self._transport.send(calls.log_lines(pk, after, filters))
            for item in data["items"]:
                line = LogLine.from_api(item)
                after = line.seq
                yield line
            if data.get("next_cursor"):
                continue
            if not follow:
                return
            await asyncio.sleep(poll_interval_seconds)

    async def events(
        self,
        deployment: DeploymentRef | None = None,
        *,
        team: str | None = None,
        actor: str | None = None,
        kind: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        order: str | None = None,
    ) -> AsyncIterator[Event]:
        """What happened in your teams, newest first; see Serving.events."""
        name = None if deployment is None else await self._name(deployment)
        filters = event_filters(name, team, actor, kind, since, until, order)
        async for event in async_pages(self._transport, calls.events(filters), Event.from_api):
            yield event

    # --- changing --------------------------------------------------------------------------

    async def scale(
        self,
        deployment: DeploymentRef,
        copies: int,
        accelerators_per_copy: Size | None = None,
        allow_moves: bool = False,
        *,
        comment: str = "",
    ) -> Deployment:
        pk = await self._id(deployment)
        request = calls.scale(pk, copies, accelerators_per_copy, allow_moves, comment)
        return Deployment.from_api(await self._transport.send(request))

    async def set_autoscaling(
        self, deployment: DeploymentRef, autoscaling: Autoscaling | None, *, comment: str = ""
    ) -> Deployment:
        request = calls.set_autoscaling(await self._id(deployment), autoscaling, comment)
        return Deployment.from_api(await self._transport.send(request))

    async def set_routing(
        self, deployment: DeploymentRef, routing: str, *, comment: str = ""
    ) -> Deployment:
        request = calls.set_routing(await self._id(deployment), routing, comment)
        return Deployment.from_api(await self._transport.send(request))

    async def set_queue(
        self,
        deployment: DeploymentRef,
        max_waiting: int,
        queue_wait_s: int | None = None,
        *,
        comment: str = "",
    ) -> Deployment:
        pk = await self._id(deployment)
        request = calls.set_queue(pk, max_waiting, queue_wait_s, comment)
        return Deployment.from_api(await self._transport.send(request))

    async def stop_deployment(self, deployment: DeploymentRef) -> Deployment:
        return await self._act(deployment, "stop")

    async def start_deployment(self, deployment: DeploymentRef) -> Deployment:
        return await self._act(deployment, "start")

    async def check_now(self, deployment: DeploymentRef) -> Deployment:
        return await self._act(deployment, "check")

    async def retry_deployment(self, deployment: DeploymentRef) -> Deployment:
        return await self._act(deployment, "retry")

    async def delete_deployment(self, deployment: DeploymentRef) -> None:
        await self._transport.send(calls.delete(await self._id(deployment)))

    # --- revisions: see Serving's ------------------------------------------------------------

    async def revisions(self, deployment: DeploymentRef) -> list[Revision]:
        answer = await self._transport.send(calls.revisions(await self._id(deployment)))
        return calls.listed_revisions(answer)

    async def revision(self, deployment: DeploymentRef, number: int) -> Revision:
        request = calls.revision(await self._id(deployment), number)
        return Revision.from_api(await self._transport.send(request))

    async def compare_revisions(
        self, deployment: DeploymentRef, number: int, other: int
    ) -> list[RevisionChange]:
        request = calls.compare_revisions(await self._id(deployment), number, other)
        return changes_of(await self._transport.send(request))

    async def roll_back(
        self, deployment: DeploymentRef, revision: int, comment: str = ""
    ) -> Deployment:
        request = calls.roll_back(await self._id(deployment), revision, comment)
        return Deployment.from_api(await self._transport.send(request))

    async def set_auto_rollback(self, deployment: DeploymentRef, enabled: bool) -> Deployment:
        request = calls.set_auto_rollback(await self._id(deployment), enabled)
        return Deployment.from_api(await self._transport.send(request))

    # --- placement -------------------------------------------------------------------------

    async def estimate(
        self,
        model: ModelRef,
        variant: str | None = None,
        max_model_len: int | None = None,
        *,
        tensor_parallel: int = 1,
        engine_settings: Mapping[str, Any] | None = None,
    ) -> Estimate:
        repo_id, chosen = await self._repo_and_variant(model, variant)
        settings = calls.settings_with(engine_settings, max_model_len)
        request = calls.estimate(repo_id, chosen, settings, tensor_parallel)
        return Estimate.from_api(await self._transport.send(request))

    async def estimate_model_vram(
        self, model: ModelRef, variant: str | None = None, max_model_len: int | None = None
    ) -> int:
        return (await self.estimate(model, variant, max_model_len)).total_bytes

    async def fit_check(
        self,
        model: ModelRef,
        cluster: ClusterRef,
        variant: str | None = None,
        copies: int = 1,
        accelerators_per_copy: Size | None = None,
        *,
        max_model_len: int | None = None,
        engine_settings: Mapping[str, Any] | None = None,
        allow_moves: bool = False,
    ) -> FitCheck:
        repo_id, chosen = await self._repo_and_variant(model, variant)
        settings = calls.settings_with(engine_settings, max_model_len)
        name = cluster_name(cluster) or (await self._clusters.get(cluster)).name
        request = calls.fit_check(
            repo_id, chosen, name, copies, accelerators_per_copy, settings, allow_moves
        )
        return FitCheck.from_api(await self._transport.send(request))

    # --- references ------------------------------------------------------------------------

    async def _id(self, deployment: DeploymentRef) -> int:
        if isinstance(deployment, Deployment):
            return deployment.id
        if isinstance(deployment, int):
            return deployment
        return (await self._named(deployment)).id

    async def _name(self, deployment: DeploymentRef) -> str:
        if isinstance(deployment, str):
            return deployment
        if isinstance(deployment, Deployment):
            return deployment.name
        return (await self.get_deployment(deployment)).name

    async def _named(self, name: str) -> Deployment:
        answer = await self._transport.send(calls.deployment_named(name))
        return calls.picked_deployment(name, answer)

    async def _model(self, model: ModelRef) -> Model:
        return model if isinstance(model, Model) else await self._models.get(model)

    async def _repo_and_variant(self, model: ModelRef, variant: str | None) -> tuple[str, str]:
        if isinstance(model, str) and variant:
            return model, variant
        found = await self._model(model)
        return found.repo_id, variant or calls.default_variant(found)

    async def _act(self, deployment: DeploymentRef, act: str) -> Deployment:
        request = calls.action(await self._id(deployment), act)
        return Deployment.from_api(await self._transport.send(request))
