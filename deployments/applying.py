"""Configuration as code: deployments written to a file (`berth export`) and a file made true
(`berth apply`). A plan says, per deployment named, create / update (with the fields that
change) / unchanged / would not fit (with why) / refused (with what to fix), and, asked for
with prune, delete for those of the file's teams that it no longer names. Carrying a plan out
is all or nothing at the check step: one blocked item and nothing is done. Each change goes
through the action that makes it by hand (host, the revision of a spec, delete), so it has its
Event and revision like any other.

The file's schema lives beside the API's input schemas (deployments/api_input.py); here a
document is plain data already of that shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

import placement
from catalog.models import Model
from clusters.models import Cluster
from console.access import operated_teams
from console.models import Team
from deployments import actions, autoscaling, revisions
from deployments.actions import ActionRefused
from deployments.choices import RoutingPolicy
from deployments.engine.variant_advice import why_it_cannot_run
from deployments.fit_words import size_text
from deployments.models import Deployment
from deployments.placing import first_reason, for_cluster, inventory_for, placement_request

VERSION = 1
# What a file names beside its spec: who owns the deployment and where it runs, which an
# apply never changes (delete the deployment, or name another, to move it).
FIXED = ("team", "model", "cluster")

CREATE, UPDATE, UNCHANGED = "create", "update", "unchanged"
WOULD_NOT_FIT, REFUSED, DELETE = "would_not_fit", "refused", "delete"
BLOCKING = frozenset({WOULD_NOT_FIT, REFUSED})


@dataclass
class Item:
    """One deployment's part of a plan."""

    name: str
    action: str
    changes: list[revisions.Difference] = field(default_factory=list)
    reason: str = ""
    # What carrying it out needs: the deployment as it is, the spec it should have.
    deployment: Deployment | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    entry: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    items: list[Item]

    @property
    def blocked(self) -> list[Item]:
        return [item for item in self.items if item.action in BLOCKING]

    def counts(self) -> dict[str, int]:
        counted = {name: 0 for name in (CREATE, UPDATE, UNCHANGED, DELETE, WOULD_NOT_FIT, REFUSED)}
        for item in self.items:
            counted[item.action] += 1
        return counted


class ApplyRefused(Exception):
    """The plan has blocked items: nothing was done."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        names = ", ".join(item.name for item in plan.blocked)
        super().__init__(f"nothing was applied: fix {names} first")


# --- the file ---------------------------------------------------------------------------


def entry_of(deployment: Deployment) -> dict[str, Any]:
    """A deployment as its file entry: where it runs, then its spec (copies left out under
    autoscaling), then its own policies."""
    spec = revisions.spec_of(deployment)
    fixed = {
        "name": deployment.name,
        "team": deployment.team.name,
        "model": deployment.model.repo_id,
        "cluster": deployment.cluster.name,
    }
    kept = {name: value for name, value in spec.items() if not (name == "copies" and value is None)}
    return {**fixed, **kept, "auto_rollback": deployment.auto_rollback}


def export(deployments: list[Deployment]) -> dict[str, Any]:
    return {"version": VERSION, "deployments": [entry_of(d) for d in deployments]}


# --- planning ---------------------------------------------------------------------------


class Planner:
    """Reads what a plan needs once (teams, models, clusters, the free room of each cluster),
    so that a plan of a hundred deployments costs little more than one."""

    def __init__(self, actor: Any, entries: list[dict[str, Any]]) -> None:
        self.actor = actor
        self.operated = {team.name: team for team in operated_teams(actor)}
        names = [entry["name"] for entry in entries]
        self.existing = {
            d.name: d
            for d in Deployment.objects.filter(name__in=names).select_related(
                "team", "model", "cluster", "variant"
            )
        }
        repo_ids = {entry["model"] for entry in entries}
        self.models = {
            m.repo_id: m
            for m in Model.objects.filter(repo_id__in=repo_ids).prefetch_related("variants")
        }
        clusters = {entry["cluster"] for entry in entries}
        self.clusters = {c.name: c for c in Cluster.objects.filter(name__in=clusters)}
        self.inventories: dict[int, placement.Inventory] = {}

    def item(self, entry: dict[str, Any]) -> Item:
        name = entry["name"]
        try:
            return self.checked_item(entry)
        except ActionRefused as refused:
            where = f"{refused.field}: " if refused.field else ""
            return Item(name, REFUSED, reason=f"{where}{refused.message}", entry=entry)

    def checked_item(self, entry: dict[str, Any]) -> Item:
        name = entry["name"]
        team = self.operated.get(entry["team"])
        if team is None:
            raise ActionRefused(f"you are not an operator of a team named {entry['team']}", "team")
        model, cluster = self.model(entry["model"]), self.cluster(entry["cluster"])
        existing = self.existing.get(name)
        if existing is not None and existing.team.name not in self.operated:
            raise ActionRefused(
                f"a deployment named {name} exists already; pick another name", "name"
            )
        if existing is not None:
            self.check_fixed(existing, entry)
        spec = wanted_spec(entry, model, cluster, existing)
        if existing is None:
            actions.check_name(name)
            return self.fitted(Item(name, CREATE, entry=entry, spec=spec), model, cluster)
        now = revisions.spec_of(existing)
        changes = revisions.differences(now, spec)
        if bool(entry.get("auto_rollback", False)) != existing.auto_rollback:
            changes.append(
                revisions.Difference(
                    "auto_rollback", existing.auto_rollback, not existing.auto_rollback
                )
            )
        if not changes:
            return Item(name, UNCHANGED, deployment=existing, entry=entry, spec=spec)
        item = Item(name, UPDATE, changes, deployment=existing, entry=entry, spec=spec)
        if revisions.rolls_copies(now, spec):
            return self.fitted(item, model, cluster)
        return item

    def check_fixed(self, existing: Deployment, entry: dict[str, Any]) -> None:
        now = {
            "team": existing.team.name,
            "model": existing.model.repo_id,
            "cluster": existing.cluster.name,
        }
        for name in FIXED:
            if entry[name] != now[name]:
                raise ActionRefused(
                    f"is {now[name]}, and an apply does not move a deployment: delete it first, "
                    f"or give the new one another name",
                    name,
                )

    def model(self, repo_id: str) -> Model:
        model = self.models.get(repo_id)
        if model is None:
            raise ActionRefused(
                f"{repo_id} is not in the catalog; add it on the Models page first", "model"
            )
        return model

    def cluster(self, name: str) -> Cluster:
        cluster = self.clusters.get(name)
        if cluster is None:
            raise ActionRefused(f"there is no cluster named {name}", "cluster")
        return cluster

    def fitted(self, item: Item, model: Model, cluster: Cluster) -> Item:
        """Would not fit where not one copy fits even on the empty cluster (the rule Host
        fails at once by); where fewer fit now than asked, the rest wait, which it says."""
        variant = model.variants.get(name=item.spec["variant"])
        wanted = item.spec["copies"] if item.spec["copies"] is not None else 1
        try:
            request = placement_request(
                model, variant, item.spec["engine_settings"], item.spec["accelerators_per_copy"],
                max(wanted, 1),
            )  # fmt: skip
            result = placement.plan(self.inventory(cluster), for_cluster(cluster, request))
        except ValueError as error:  # facts placement refuses, e.g. heads not divisible
            return Item(item.name, WOULD_NOT_FIT, reason=str(error), entry=item.entry)
        if wanted and not result.fit_empty:
            reason = first_reason(result, "No copy fits this cluster.")
            return Item(item.name, WOULD_NOT_FIT, reason=reason, entry=item.entry)
        if wanted and result.fit_now < wanted:
            item.reason = f"{result.fit_now} of {wanted} fit now; the rest wait for room"
        return item

    def inventory(self, cluster: Cluster) -> placement.Inventory:
        if cluster.pk not in self.inventories:
            self.inventories[cluster.pk] = inventory_for(cluster)
        return self.inventories[cluster.pk]


def wanted_spec(
    entry: dict[str, Any], model: Model, cluster: Cluster, existing: Deployment | None
) -> dict[str, Any]:
    """The spec a file entry asks for, each field checked and written as a revision keeps it."""
    variant = next((v for v in model.variants.all() if v.name == entry["variant"]), None)
    if variant is None:
        names = ", ".join(sorted(v.name for v in model.variants.all()))
        raise ActionRefused(f"{model} has no variant {entry['variant']}; it has {names}", "variant")
    cannot_run = why_it_cannot_run(variant, cluster)
    if cannot_run:
        raise ActionRefused(cannot_run, "variant")
    policy = actions.parse_policy(entry.get("autoscaling"))
    name = entry["name"]
    return {
        "variant": variant.name,
        "revision": actions.printable(
            entry.get("revision", ""), "revision", actions.LONGEST_REVISION
        ),
        "accelerators_per_copy": size_text(actions.parse_size(entry["accelerators_per_copy"])),
        "copies": None if policy else actions.parse_copies(entry.get("copies", 1)),
        "autoscaling": policy.as_json() if policy else None,
        "engine_settings": actions.checked_settings(entry.get("engine_settings"), cluster),
        "chat_name": actions.check_chat_name(entry.get("chat_name", ""), name),
        "reply_wait_s": actions.parse_reply_wait(entry.get("reply_wait_s")),
        "routing": actions.parse_routing(entry.get("routing", RoutingPolicy.LEAST_LOADED)),
        "max_waiting": actions.parse_max_waiting(entry.get("max_waiting", 0)),
        "queue_wait_s": actions.parse_queue_wait(entry.get("queue_wait_s")),
        "movable": bool(entry.get("movable", True)),
        **{name: part.check(entry.get(name)) for name, part in revisions.PARTS.items()},
    }


def plan(actor: Any, entries: list[dict[str, Any]], prune: bool = False) -> Plan:
    """What applying the entries would do; nothing is written."""
    duplicated = duplicate_names(entries)
    if duplicated:
        raise ActionRefused(
            f"{', '.join(duplicated)} named more than once; name each deployment once",
            "deployments",
        )
    planner = Planner(actor, entries)
    items = [planner.item(entry) for entry in entries]
    if prune:
        items += pruned(planner, entries)
    return Plan(items)


def duplicate_names(entries: list[dict[str, Any]]) -> list[str]:
    seen: set[str] = set()
    twice = []
    for entry in entries:
        if entry["name"] in seen and entry["name"] not in twice:
            twice.append(entry["name"])
        seen.add(entry["name"])
    return twice


def pruned(planner: Planner, entries: list[dict[str, Any]]) -> list[Item]:
    """Deployments of the file's teams (those the actor operates) that it does not name."""
    teams = [planner.operated[e["team"]] for e in entries if e["team"] in planner.operated]
    named = {entry["name"] for entry in entries}
    gone = Deployment.objects.filter(team__in=teams, delete_when_stopped=False).exclude(
        name__in=named
    )
    return [Item(d.name, DELETE, deployment=d) for d in gone.order_by("name")]


# --- carrying it out --------------------------------------------------------------------


def apply(actor: Any, entries: list[dict[str, Any]], prune: bool = False) -> Plan:
    """Plan, then carry the plan out in one transaction; a blocked item and nothing is done
    (ApplyRefused, with the plan)."""
    with transaction.atomic():
        done = plan(actor, entries, prune)
        if done.blocked:
            raise ApplyRefused(done)
        for item in done.items:
            carry_out(actor, item)
    return done


def carry_out(actor: Any, item: Item) -> None:
    if item.action == CREATE:
        create(actor, item)
    elif item.action == UPDATE:
        update(actor, item)
    elif item.action == DELETE:
        assert item.deployment is not None
        actions.delete(actor, item.deployment)


def create(actor: Any, item: Item) -> None:
    entry, spec = item.entry, item.spec
    model = Model.objects.get(repo_id=entry["model"])
    policy = autoscaling.stored(spec["autoscaling"])
    actions.host(
        actor,
        actions.HostRequest(
            team=Team.objects.get(name=entry["team"]),
            model=model,
            variant=model.variants.get(name=spec["variant"]),
            cluster=Cluster.objects.get(name=entry["cluster"]),
            name=item.name,
            copies=spec["copies"] if policy is None else policy.min_copies,
            accelerators_per_copy=spec["accelerators_per_copy"],
            engine_settings=spec["engine_settings"],
            chat_name=spec["chat_name"],
            reply_wait_s=spec["reply_wait_s"],
            routing=spec["routing"],
            revision=spec["revision"],
            autoscaling=spec["autoscaling"],
            max_waiting=spec["max_waiting"],
            queue_wait_s=spec["queue_wait_s"],
            movable=spec["movable"],
            auto_rollback=bool(entry.get("auto_rollback", False)),
            comment="Applied from a file",
        ),
    )


def update(actor: Any, item: Item) -> None:
    assert item.deployment is not None
    spec_changes = [c for c in item.changes if c.field != "auto_rollback"]
    if spec_changes:
        actions.revise(actor, item.deployment, item.spec, "Apply", "Applied from a file")
    wanted_rollback = bool(item.entry.get("auto_rollback", False))
    if wanted_rollback != item.deployment.auto_rollback:
        actions.set_auto_rollback(actor, item.deployment, wanted_rollback)
