"""The fleet overview, the console's home page: what a platform team looks at first.

Failing deployments first; deployments by state; per cluster and GPU product the memory reserved
and free; a map of every GPU with the copies on it (a share drawn as its part of the card); the
last hour's requests and tokens; the teams that used the most. A user sees the deployments of
their teams (a platform admin all); another team's copy on a GPU shows as "another team" with
its size, as on a cluster's page.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import Count, Prefetch, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from clusters.models import Accelerator, Cluster, Machine
from console.access import is_platform_admin, team_roles
from console.models import Team
from deployments.access import visible_deployments
from deployments.choices import DeploymentState
from deployments.models import Deployment, Reservation
from deployments.room import annotate_room, holders_by_accelerator
from gateway.models import MinuteFigures, UsageRecord
from placement.words import percent_of

HOUR = timedelta(hours=1)
TOP_TEAMS = 5
# First the deployments that need a person: given up, then failing, then serving with less.
NEEDS_A_LOOK = (
    DeploymentState.FAILED,
    DeploymentState.MUST_REDOWNLOAD,
    DeploymentState.ERROR,
    DeploymentState.DEGRADED,
)


@dataclass
class ProductRoom:
    """One GPU product in one cluster: its memory, and how much of it copies reserve."""

    cluster: Cluster
    product: str
    gpus: int = 0
    memory_bytes: int = 0
    reserved_bytes: int = 0

    @property
    def free_bytes(self) -> int:
        return max(0, self.memory_bytes - self.reserved_bytes)

    @property
    def reserved_percent(self) -> int:
        return percent_of(self.reserved_bytes, self.memory_bytes)


@dataclass
class LastHour:
    requests: int = 0
    generated_tokens: int = 0
    per_minute: list[int] = field(default_factory=list)  # requests, oldest minute first

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / HOUR.total_seconds()

    @property
    def busiest_minute(self) -> int:
        return max(self.per_minute, default=0)

    @property
    def bars(self) -> list[tuple[int, int, int]]:
        """(x, y, height) of each minute's bar, on a 60 × 100 chart (y down, as SVG draws) whose
        busiest minute is full height."""
        top = self.busiest_minute or 1
        heights = [round(100 * n / top) for n in self.per_minute]
        return [(x, 100 - height, height) for x, height in enumerate(heights)]


def overview(user: Any) -> dict[str, Any]:
    """The page's context for `user`."""
    shown = visible_deployments(user)
    clusters = clusters_with_gpus(user)
    return {
        "needs_a_look": needs_a_look(shown),
        "by_state": by_state(shown),
        "rooms": rooms(clusters),
        "clusters": clusters,
        "last_hour": last_hour(shown),
        "top_teams": top_teams(user),
    }


def needs_a_look(shown: Any) -> list[Deployment]:
    rows = shown.filter(state__in=NEEDS_A_LOOK).select_related("team", "cluster")
    rank = {state: n for n, state in enumerate(NEEDS_A_LOOK)}
    return sorted(rows, key=lambda d: (rank[d.state], d.name))


def by_state(shown: Any) -> list[tuple[str, str, int]]:
    """(state, label, count) for every state some deployment is in, in the vocabulary's order."""
    counted = dict(shown.values_list("state").annotate(n=Count("pk")).order_by())
    return [(s.value, s.label, counted[s]) for s in DeploymentState if counted.get(s)]


def clusters_with_gpus(user: Any) -> list[Cluster]:
    """Every cluster with its machines' GPUs, each annotated with its holders (annotate_room)."""
    gpus = Accelerator.objects.filter(parent__isnull=True).prefetch_related("slices")
    machines = Machine.objects.prefetch_related(
        Prefetch("accelerators", queryset=gpus, to_attr="gpus")
    )
    clusters = list(Cluster.objects.prefetch_related(Prefetch("machines", queryset=machines)))
    held = holders_by_accelerator(user, Reservation.objects.all())
    for cluster in clusters:
        for machine in cluster.machines.all():
            for gpu in machine.gpus:
                annotate_room(gpu, held)
    return clusters


def rooms(clusters: list[Cluster]) -> list[ProductRoom]:
    kept: dict[tuple[int, str], ProductRoom] = {}
    for cluster in clusters:
        for machine in cluster.machines.all():
            for gpu in machine.gpus:
                room = kept.setdefault((cluster.pk, gpu.product), ProductRoom(cluster, gpu.product))
                room.gpus += 1
                room.memory_bytes += gpu.memory_bytes
                room.reserved_bytes += gpu.memory_bytes - gpu.free_bytes
    return list(kept.values())


def last_hour(shown: Any) -> LastHour:
    """The shown deployments' traffic in the last hour, from the gateway's minute figures (which
    lag by up to a minute, their flush interval)."""
    now = timezone.now().replace(second=0, microsecond=0)
    since = now - HOUR
    rows = MinuteFigures.objects.filter(minute__gt=since, deployment__in=shown)
    per_minute: dict[int, int] = defaultdict(int)
    figures = LastHour()
    for minute, requests, tokens in rows.values_list("minute", "requests", "generated_tokens"):
        per_minute[int((minute - since) / timedelta(minutes=1))] += requests
        figures.requests += requests
        figures.generated_tokens += tokens
    figures.per_minute = [per_minute[n] for n in range(1, 61)]
    return figures


def top_teams(user: Any) -> list[tuple[Team, int, int]]:
    """(team, requests, tokens) of the teams that used the most in the last hour: every team for
    a platform admin, the user's own teams for anyone else."""
    records = UsageRecord.objects.filter(at__gte=timezone.now() - HOUR, team__isnull=False)
    if not is_platform_admin(user):
        records = records.filter(team_id__in=team_roles(user))
    summed = (
        records.values("team")
        .annotate(requests=Count("pk"), tokens=used_tokens())
        .order_by("-tokens", "team")[:TOP_TEAMS]
    )
    teams = Team.objects.in_bulk([row["team"] for row in summed])
    return [(teams[row["team"]], row["requests"], row["tokens"] or 0) for row in summed]


def used_tokens() -> Any:
    # A refused request has no prompt tokens counted (null): it adds nothing.
    return Coalesce(Sum("prompt_tokens"), Value(0)) + Coalesce(Sum("completion_tokens"), Value(0))
