"""One function per operator action. Each runs in a transaction, writes an Event with the actor,
and enqueues its tasks on commit. Views and the API call these, never the ORM, for changes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from catalog import downloads, gated
from catalog.models import Model, ServerModel, Variant
from clusters.models import Cluster
from console import live
from console.models import SLUG_PATTERN, Team
from deployments import autoscaling, lifecycle, load, revisions, transitions
from deployments.choices import (
    COPY_STOPPING_OR_STOPPED,
    DEPLOYMENT_CAN_SCALE,
    DEPLOYMENT_GAVE_UP,
    DEPLOYMENT_STOPPING_OR_STOPPED,
    CopyState,
    DeploymentState,
    EventKind,
    RoutingPolicy,
)
from deployments.engine.settings import EngineSettingsError, validate_settings
from deployments.engine.variant_advice import why_it_cannot_run
from deployments.models import (
    MOST_COPIES,
    MOST_WAITING,
    REPLY_WAIT_MAX_S,
    REPLY_WAIT_MIN_S,
    Deployment,
    Event,
    Revision,
)
from placement.words import plural


class ActionRefused(Exception):
    """An action cannot be done as asked; `field` names what to change (or is empty)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Done:
    """What an action did, in the words the operator is shown (the page's message, the API's
    202); `deployment` as it is after the action, None when it is gone."""

    deployment: Deployment | None
    words: str


# Stored settings the allow-list refuses (set on upgrade; cleared by new settings).
SETTINGS_REFUSED = "SettingsRefused"


def record(deployment: Deployment, actor: Any, message: str) -> None:
    Event.objects.create(
        deployment=deployment,
        deployment_name=deployment.name,
        kind=EventKind.ACTION,
        message=message,
        **transitions.actor_fields(actor),
    )


# --- checking what an operator asked for --------------------------------------------------

# The rules below, each in one place: the API's OpenAPI document states them from these
# (deployments/api.py), so that a request it allows is never refused by them.
MOST_ACCELERATORS_PER_COPY = 64  # a whole number of GPUs of one machine
SIZE_DECIMALS = 3  # a share of a GPU: 0.125, never 0.1251 (the column keeps three)
LONGEST_NAME = 63  # a deployment's name: a DNS label, as Kubernetes objects are named
LONGEST_CHAT_NAME = 100
LONGEST_REVISION = 100
LONGEST_COMMENT = 500  # why a change was made, kept with its revision
# Text a person reads back (a chat name): no control characters, nor the invisible ones that
# hide or reorder what is shown (zero widths, bidirectional controls, line separators). Written
# so that Python and JSON Schema (ECMA 262) read it alike.
SHOWN_TEXT = (
    r"^[^\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    r"\ufeff\ufff9-\ufffb]*$"
)


def parse_size(raw: Any) -> Decimal:
    try:
        size = Decimal(str(raw))
    except (InvalidOperation, ValueError):
        raise ActionRefused(
            "must be a number such as 0.5, 1 or 2", "accelerators_per_copy"
        ) from None
    if not (0 < size < 1 or (size >= 1 and size == size.to_integral_value())):
        raise ActionRefused(
            f"{raw} is not a size: use a share between 0 and 1 (e.g. 0.25, 0.5), 1, or a whole "
            "number of accelerators (2, 4, 8)",
            "accelerators_per_copy",
        )
    if size > MOST_ACCELERATORS_PER_COPY:
        raise ActionRefused(
            f"{raw} is too many: at most {MOST_ACCELERATORS_PER_COPY} accelerators per copy",
            "accelerators_per_copy",
        )
    if size.as_tuple().exponent < -SIZE_DECIMALS:  # type: ignore[operator]
        raise ActionRefused("use at most three decimals", "accelerators_per_copy")
    return size


def parse_copies(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ActionRefused("must be a whole number, 0 or more", "copies")
    try:
        copies = int(raw)
    except ValueError:
        raise ActionRefused("must be a whole number, 0 or more", "copies") from None
    if copies < 0 or copies > MOST_COPIES:
        raise ActionRefused(f"{copies} is not allowed: use 0 to {MOST_COPIES}", "copies")
    return copies


def parse_reply_wait(raw: Any) -> int | None:
    return seconds_or_none(raw, "reply_wait_s", REPLY_WAIT_MIN_S, "for the gateway's default")


def parse_queue_wait(raw: Any) -> int | None:
    return seconds_or_none(raw, "queue_wait_s", 1, "to wait as long as the reply wait")


def seconds_or_none(raw: Any, field: str, lowest: int, empty_means: str) -> int | None:
    """Whole seconds from `lowest` to REPLY_WAIT_MAX_S, or None for an empty value."""
    if raw in (None, ""):
        return None
    try:
        wait = int(raw)
    except (TypeError, ValueError):
        raise ActionRefused("must be a whole number of seconds", field) from None
    if not lowest <= wait <= REPLY_WAIT_MAX_S:
        raise ActionRefused(
            f"{wait} s is not allowed: use {lowest} to {REPLY_WAIT_MAX_S} seconds, "
            f"or leave it empty {empty_means}",
            field,
        )
    return wait


def parse_max_waiting(raw: Any) -> int:
    try:
        waiting = int(raw)
    except (TypeError, ValueError):
        raise ActionRefused("must be a whole number, 0 or more", "max_waiting") from None
    if not 0 <= waiting <= MOST_WAITING:
        raise ActionRefused(
            f"{waiting} is not allowed: use 0 (no queue) to {MOST_WAITING}", "max_waiting"
        )
    return waiting


def parse_routing(raw: Any) -> str:
    if raw not in RoutingPolicy.values:
        raise ActionRefused(
            f"{raw!r} is not a routing policy: use {', '.join(RoutingPolicy.values)}", "routing"
        )
    return str(raw)


def parse_comment(raw: Any) -> str:
    return printable(raw, "comment", LONGEST_COMMENT)


def plain_name(name: Any) -> str:
    # fullmatch: re.match's "$" lets a trailing newline through, which JSON Schema's does not.
    if (
        not isinstance(name, str)
        or not re.fullmatch(SLUG_PATTERN, name)
        or len(name) > LONGEST_NAME
    ):
        raise ActionRefused(
            f"use lowercase letters, digits and dashes (at most {LONGEST_NAME}), starting and "
            "ending with a letter or digit, e.g. qwen3-8b",
            "name",
        )
    return name


def check_name(name: Any) -> str:
    plain_name(name)
    if Deployment.objects.filter(name=name).exists():
        raise ActionRefused(f"a deployment named {name} exists already; pick another name", "name")
    return name


def printable(value: Any, field: str, longest: int) -> str:
    """Text as typed, checked before the spaces around it are dropped: the rule is the text
    sent, as the OpenAPI document states it (a tab or newline at either end is refused too)."""
    if value is not None and not isinstance(value, str):
        raise ActionRefused("must be text", field)
    text = value or ""
    if len(text) > longest:
        raise ActionRefused(f"use at most {longest} characters", field)
    if not re.fullmatch(SHOWN_TEXT, text):
        raise ActionRefused("use printable characters only", field)
    return text.strip()


def chat_name_taken(chat_name: str, deployment_name: str) -> bool:
    """Whether the chat name is another deployment's own name (the gateway finds deployments by
    name and by chat name), unless that deployment is offered under it too."""
    clash = Deployment.objects.filter(name=chat_name).exclude(name=deployment_name)
    return bool(chat_name) and clash.exclude(chat_name=chat_name).exists()


def check_chat_name(chat_name: Any, deployment_name: str) -> str:
    chat_name = printable(chat_name, "chat_name", LONGEST_CHAT_NAME)
    if chat_name_taken(chat_name, deployment_name):
        raise ActionRefused(
            f"{chat_name} is the name of another deployment; pick another chat name", "chat_name"
        )
    return chat_name


def checked_settings(settings: Any, cluster: Cluster | None) -> dict[str, Any]:
    """Engine settings as the cluster's own vLLM version takes them (no cluster, as for a
    memory estimate: the newest version Berth knows)."""
    try:
        return validate_settings(settings or {}, cluster.engine_version if cluster else "")
    except EngineSettingsError as error:
        raise ActionRefused(f"{error.field}: {error.message}", "engine_settings") from None


# --- the actions -------------------------------------------------------------------------


@dataclass(frozen=True)
class HostRequest:
    """What Host needs; the wizard and the API both build one."""

    team: Team
    model: Model
    variant: Variant
    cluster: Cluster
    name: str
    copies: Any = 1
    accelerators_per_copy: Any = 1
    engine_settings: Any = None
    chat_name: Any = ""
    reply_wait_s: Any = None
    routing: Any = RoutingPolicy.LEAST_LOADED
    max_waiting: Any = 0  # the queue when every copy is full (gateway/queueing.py)
    queue_wait_s: Any = None
    revision: str = ""
    autoscaling: Any = None  # the API's object (deployments/autoscaling.py reads it)
    movable: bool = True  # False: re-packing never moves its copies
    allow_moves: bool = False  # True: other copies may move to make room (deployments/moving.py)
    auto_rollback: Any = False  # True: a revision whose copies never serve is rolled back
    comment: Any = ""  # why, kept with the first revision


def host(actor: Any, request: HostRequest) -> Deployment:
    """Record the deployment and start placing it; returns at once (REQUESTED)."""
    name = check_name(request.name)
    policy = parse_policy(request.autoscaling)
    copies = parse_copies(request.copies)
    values = {
        "copies_wanted": policy.clamp(copies) if policy else copies,  # starts within the bounds
        "autoscaling": policy.as_json() if policy else None,
        "accelerators_per_copy": parse_size(request.accelerators_per_copy),
        "engine_settings": checked_settings(request.engine_settings, request.cluster),
        "chat_name": check_chat_name(request.chat_name, name),
        "reply_wait_s": parse_reply_wait(request.reply_wait_s),
        "routing": parse_routing(request.routing),
        "max_waiting": parse_max_waiting(request.max_waiting),
        "queue_wait_s": parse_queue_wait(request.queue_wait_s),
        "movable": request.movable is not False,
        "make_room": parse_allow_moves(request.allow_moves),
        "auto_rollback": parse_yes_no(request.auto_rollback, "auto_rollback"),
    }
    comment = parse_comment(request.comment)
    if request.variant.model_id != request.model.pk:
        raise ActionRefused(
            f"{request.variant.name} is not a variant of {request.model}", "variant"
        )
    cannot_run = why_it_cannot_run(request.variant, request.cluster)
    if cannot_run:
        raise ActionRefused(cannot_run, "variant")
    # What can never fit is told before any network look-up: an offline server gives the reason.
    unsaved = Deployment(
        model=request.model, variant=request.variant, cluster=request.cluster, **values
    )
    never = lifecycle.never_fits(unsaved)
    if not never:
        try:
            gated.require_access(request.team, request.model)
        except gated.GatedRefused as refused:
            raise ActionRefused(str(refused), "model") from None
    try:
        with transaction.atomic():
            deployment = Deployment.objects.create(
                name=name,
                team=request.team,
                model=request.model,
                variant=request.variant,
                cluster=request.cluster,
                revision=printable(request.revision, "revision", LONGEST_REVISION),
                engine=request.variant.engine,
                created_by=actor if actor and actor.is_authenticated else None,
                last_message="Accepted; placing the copies.",
                **values,
            )
            autoscaled = f", autoscaling {policy.words()}" if policy else ""
            moves = ", moving other copies to make room where needed" if values["make_room"] else ""
            words = (
                f"Host {values['copies_wanted']} × {values['accelerators_per_copy']} "
                f"on {request.cluster.name}{autoscaled}{moves}"
            )
            record(deployment, actor, words)
            revisions.keep(deployment.pk, actor, words, comment)
            live.broadcast_on_commit("deployments", live.DEPLOYMENT_ADDED, deployment.pk)
            if never:
                lifecycle.fail_at_once(deployment, never)  # nothing fetched, no copy made
                return Deployment.objects.get(pk=deployment.pk)
            if lifecycle.files_on_this_server(deployment) is None:
                fetch_files(deployment, actor)
            lifecycle.enqueue("place_deployment", deployment.pk)
    except (IntegrityError, ValidationError) as error:
        raise ActionRefused(f"could not be saved: {error}") from None
    return deployment


def fetch_files(deployment: Deployment, actor: Any) -> None:
    """The server downloads the model if it does not have it yet; the deployment waits."""
    from catalog.downloads import DownloadRefused, request_download

    try:
        request_download(deployment.variant, deployment.revision, deployment.team, actor)
    except DownloadRefused as refused:
        raise ActionRefused(str(refused), "revision") from None


def parse_allow_moves(raw: Any) -> bool:
    return parse_yes_no(raw, "allow_moves", "to let other copies move to make room")


def parse_yes_no(raw: Any, field: str, true_means: str = "for yes") -> bool:
    if raw in (True, False):
        return bool(raw)
    if raw in ("", None, "off", "false"):
        return False
    if raw in ("on", "true"):
        return True
    raise ActionRefused(
        f"{str(raw)[:40]!r} is not a yes or no: give true {true_means}, or false", field
    )


def scale(
    actor: Any,
    deployment: Deployment,
    copies: Any,
    accelerators_per_copy: Any = None,
    allow_moves: Any = False,
    comment: Any = "",
) -> Done:
    """Set how many copies run and (optionally) the size of each; with `allow_moves`, copies of
    other deployments may move to make room for the new ones."""
    wanted = parse_copies(copies)
    note = parse_comment(comment)
    make_room = parse_allow_moves(allow_moves)
    size = (
        deployment.accelerators_per_copy
        if accelerators_per_copy in (None, "")
        else parse_size(accelerators_per_copy)
    )
    if deployment.state not in DEPLOYMENT_CAN_SCALE:
        raise ActionRefused(
            f"a {deployment.get_state_display().lower()} deployment cannot be scaled; "
            "start it first"
        )
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        new_size = size != locked.accelerators_per_copy
        # A fixed number is the operator's word over the autoscaler's: it turns autoscaling off.
        fields = {
            "copies_wanted": wanted,
            "accelerators_per_copy": size,
            "autoscaling": None,
            "make_room": make_room,
        }
        if new_size:
            fields["generation"] = locked.generation + 1
        Deployment.objects.filter(pk=locked.pk).update(**fields)
        words = f"Scale to {plural(wanted, 'copy', 'copies')}"
        words += f" of {size} accelerator{'s' if size > 1 else ''} each" if new_size else ""
        words += ", moving other copies to make room where needed" if make_room else ""
        was_autoscaled = locked.autoscaling is not None
        words += " (autoscaling off)" if was_autoscaled else ""
        record(locked, actor, words)
        revisions.keep(locked.pk, actor, words, note)
        lifecycle.enqueue("converge_deployment", locked.pk)
    done = f"Scaling to {plural(wanted, 'copy', 'copies')}."
    if was_autoscaled:
        done += " Autoscaling is off: the deployment keeps this number until you change it."
    return Done(Deployment.objects.get(pk=deployment.pk), done)


def parse_policy(raw: Any) -> autoscaling.Policy | None:
    try:
        return autoscaling.parse(raw)
    except autoscaling.PolicyRefused as refused:
        raise ActionRefused(refused.message, refused.field) from None


def set_autoscaling(actor: Any, deployment: Deployment, raw: Any, comment: Any = "") -> Done:
    """Let the deployment scale itself between bounds (None: back to a fixed number, the one it
    has now). Copies that serve keep serving: only those outside the new bounds start or leave."""
    policy = parse_policy(raw)
    note = parse_comment(comment)
    if deployment.state not in DEPLOYMENT_CAN_SCALE:
        raise ActionRefused(
            f"a {deployment.get_state_display().lower()} deployment cannot autoscale; "
            "start it first"
        )
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        wanted = policy.settle(locked.copies_wanted) if policy else locked.copies_wanted
        Deployment.objects.filter(pk=locked.pk).update(
            autoscaling=policy.as_json() if policy else None, copies_wanted=wanted
        )
        words = f"Autoscale from {policy.words()}" if policy else "Autoscaling off"
        record(locked, actor, words)
        revisions.keep(locked.pk, actor, words, note)
        if wanted != locked.copies_wanted:
            lifecycle.enqueue("converge_deployment", locked.pk)
    load.write_pending(locked.pk, None)  # a wish under the old policy means nothing now
    if policy is None:
        done = f"Autoscaling is off: {plural(wanted, 'copy', 'copies')} from now on."
    else:
        done = f"Autoscaling from {policy.words()}; copies that serve keep serving."
    return Done(Deployment.objects.get(pk=deployment.pk), done)


def autoscale_to(deployment_id: int, copies: int, why: str) -> None:
    """The autoscaler's change: the number it decided, with its reasons as the Event. Left
    alone if an operator turned autoscaling off meanwhile."""
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().filter(pk=deployment_id).first()
        if locked is None or locked.autoscaling is None or locked.copies_wanted == copies:
            return
        Deployment.objects.filter(pk=locked.pk).update(copies_wanted=copies, waking_since=None)
        Event.objects.create(
            deployment=locked, deployment_name=locked.name, kind=EventKind.AUTOSCALE, message=why
        )
        lifecycle.enqueue("converge_deployment", locked.pk)


def change_settings(
    actor: Any, deployment: Deployment, engine_settings: Any, comment: Any = ""
) -> Deployment:
    """New engine settings: copies are replaced (new generation) the way a size change is."""
    settings = checked_settings(engine_settings, deployment.cluster)
    note = parse_comment(comment)
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        Deployment.objects.filter(pk=locked.pk).update(
            engine_settings=settings,
            generation=locked.generation + 1,
            notices=[n for n in locked.notices if n != SETTINGS_REFUSED],  # checked just now
        )
        words = f"Change engine settings to {settings or 'the defaults'}"
        record(locked, actor, words)
        revisions.keep(locked.pk, actor, words, note)
        if locked.state == DeploymentState.FAILED:
            transitions.move_deployment(
                locked.pk,
                DeploymentState.REQUESTED,
                message="Settings changed; trying again.",
                actor=actor,
            )
        lifecycle.enqueue("converge_deployment", locked.pk)
    return Deployment.objects.get(pk=deployment.pk)


def offer_in_chat(actor: Any, deployment: Deployment, chat_name: Any, comment: Any = "") -> Done:
    name = check_chat_name(chat_name, deployment.name)
    note = parse_comment(comment)
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(chat_name=name)
        said = f"Offer in chat as {name}" if name else "Stop offering in chat"
        record(deployment, actor, said)
        revisions.keep(deployment.pk, actor, said, note)
    words = f"Offered in chat as {name}." if name else "Not offered in chat any more."
    return Done(Deployment.objects.get(pk=deployment.pk), words)


def set_reply_wait(actor: Any, deployment: Deployment, seconds: Any, comment: Any = "") -> Done:
    wait = parse_reply_wait(seconds)
    note = parse_comment(comment)
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(reply_wait_s=wait)
        said = f"A reply must start within {wait} s" if wait else "Reply wait: the default"
        record(deployment, actor, said)
        revisions.keep(deployment.pk, actor, said, note)
    words = f"A reply must now start within {wait} s." if wait else "Reply wait: the default."
    return Done(Deployment.objects.get(pk=deployment.pk), words)


def set_routing(actor: Any, deployment: Deployment, policy: Any, comment: Any = "") -> Done:
    """How the gateway picks a copy from now on; the copies go on serving as they are."""
    routing = RoutingPolicy(parse_routing(policy))
    note = parse_comment(comment)
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(routing=routing)
        said = f"Routing: {routing.label.lower()} ({routing.value})"
        record(deployment, actor, said)
        revisions.keep(deployment.pk, actor, said, note)
    words = f"Requests are now routed {ROUTED_BY[routing]}."
    return Done(Deployment.objects.get(pk=deployment.pk), words)


def set_queue(
    actor: Any, deployment: Deployment, max_waiting: Any, queue_wait_s: Any, comment: Any = ""
) -> Done:
    """How many requests may wait at each gateway process when every copy is full, and for
    how long (gateway/queueing.py)."""
    waiting, wait = parse_max_waiting(max_waiting), parse_queue_wait(queue_wait_s)
    note = parse_comment(comment)
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(max_waiting=waiting, queue_wait_s=wait)
        record(deployment, actor, queue_words(waiting, wait))
        revisions.keep(deployment.pk, actor, queue_words(waiting, wait), note)
    return Done(Deployment.objects.get(pk=deployment.pk), f"{queue_words(waiting, wait)}.")


def set_auto_rollback(actor: Any, deployment: Deployment, enabled: Any) -> Done:
    """Whether a revision whose copies never serve is rolled back to the last that served."""
    on = parse_yes_no(enabled, "enabled", "to roll back a revision whose copies never serve")
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(auto_rollback=on)
        said = "Roll back failed revisions by itself" if on else "No rollback by itself"
        record(deployment, actor, said)
    words = (
        "A revision whose copies never serve is now rolled back to the last that served."
        if on
        else "A revision whose copies never serve now stays until you change it."
    )
    return Done(Deployment.objects.get(pk=deployment.pk), words)


def revision_numbered(deployment: Deployment, number: Any) -> Revision:
    if isinstance(number, bool) or not isinstance(number, int | str) or not str(number).isdigit():
        raise ActionRefused("must be a revision's number, e.g. 3", "revision")
    found = deployment.revisions.filter(number=int(number)).first()
    if found is None:
        last = revisions.latest(deployment.pk)
        kept = f"it has revisions 1 to {last.number}" if last else "it has none yet"
        raise ActionRefused(f"{deployment.name} has no revision {number}: {kept}", "revision")
    return found


def roll_back(actor: Any, deployment: Deployment, number: Any, comment: Any = "") -> Done:
    """Make a new revision equal to revision `number`; copies roll make-before-break where it
    changes what they run, as a settings change does."""
    target = revision_numbered(deployment, number)
    return revise(
        actor,
        deployment,
        target.spec,
        f"Roll back to revision {target.number}",
        parse_comment(comment),
        restores=target.number,
    )


def roll_back_failed(deployment_id: int, failed_number: int) -> None:
    """The deployment's own rollback of a revision whose copies never served (a task): to the
    last revision that served, unless another change came meanwhile."""
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None or not deployment.auto_rollback:
        return
    last, good = revisions.latest(deployment_id), revisions.last_served(deployment_id)
    if last is None or last.number != failed_number or good is None:
        return
    why = f"Roll back to revision {good.number}: revision {failed_number}'s copies never served"
    try:
        revise(None, deployment, good.spec, why, "", restores=good.number)
    except ActionRefused as refused:
        record(deployment, None, f"Could not roll back to revision {good.number}: {refused}")


def revise(
    actor: Any,
    deployment: Deployment,
    spec: dict[str, Any],
    why: str,
    comment: str,
    restores: int | None = None,
) -> Done:
    """Make the deployment what `spec` (a revision's) says, checked as each action checks its
    own field, in one transaction with its revision. Where it changes what the copies run, a
    new generation replaces them make-before-break."""
    with transaction.atomic():
        locked = (
            Deployment.objects.select_for_update().select_related("variant").get(pk=deployment.pk)
        )
        now = revisions.spec_of(locked)
        changes = revisions.differences(now, spec)
        if not changes:
            raise ActionRefused(
                f"{locked.name} is asked to be that now: nothing changes", "revision"
            )
        fields = fields_of_spec(locked, spec)
        rolled = revisions.rolls_copies(now, spec)
        if rolled:
            fields["generation"] = locked.generation + 1
            fields["notices"] = [n for n in locked.notices if n != SETTINGS_REFUSED]
        Deployment.objects.filter(pk=locked.pk).update(**fields)
        for change in changes:
            part = revisions.PARTS.get(change.field)
            if part is not None:
                part.write(actor, locked, change.after)
        words = f"{why}: {'; '.join(change.words for change in changes)}"
        record(locked, actor, words)
        revisions.keep(locked.pk, actor, words, comment, restores=restores)
        if rolled and locked.state == DeploymentState.FAILED:
            transitions.move_deployment(
                locked.pk, DeploymentState.REQUESTED, message=f"{why}; trying again.", actor=actor
            )
        other_files = any(now[name] != spec.get(name) for name in ("variant", "revision"))
        changed = Deployment.objects.get(pk=locked.pk)
        if other_files and lifecycle.files_on_this_server(changed) is None:
            fetch_files(changed, actor)
        lifecycle.enqueue("converge_deployment", locked.pk)
    if now["autoscaling"] != spec.get("autoscaling"):
        load.write_pending(locked.pk, None)  # a wish under the old policy means nothing now
    rolls = " The copies are replaced one by one as the new ones serve." if rolled else ""
    return Done(Deployment.objects.get(pk=deployment.pk), f"{why}.{rolls}")


def fields_of_spec(deployment: Deployment, spec: dict[str, Any]) -> dict[str, Any]:
    """The deployment's fields for a spec, each checked by its action's own rule (a revision
    may name what is no longer allowed: a chat name taken since, a variant removed)."""
    variant = deployment.model.variants.filter(name=spec.get("variant")).first()
    if variant is None:
        raise ActionRefused(
            f"{deployment.model} has no variant {spec.get('variant')} any more", "variant"
        )
    cannot_run = why_it_cannot_run(variant, deployment.cluster)
    if cannot_run:
        raise ActionRefused(cannot_run, "variant")
    policy = parse_policy(spec.get("autoscaling"))
    copies = deployment.copies_wanted if policy else parse_copies(spec.get("copies"))
    return {
        "variant": variant,
        "engine": variant.engine,
        "revision": printable(spec.get("revision"), "revision", LONGEST_REVISION),
        "accelerators_per_copy": parse_size(spec.get("accelerators_per_copy")),
        "autoscaling": policy.as_json() if policy else None,
        "copies_wanted": policy.settle(copies) if policy else copies,
        "engine_settings": checked_settings(spec.get("engine_settings"), deployment.cluster),
        "chat_name": check_chat_name(spec.get("chat_name"), deployment.name),
        "reply_wait_s": parse_reply_wait(spec.get("reply_wait_s")),
        "routing": parse_routing(spec.get("routing", RoutingPolicy.LEAST_LOADED)),
        "max_waiting": parse_max_waiting(spec.get("max_waiting", 0)),
        "queue_wait_s": parse_queue_wait(spec.get("queue_wait_s")),
        "movable": parse_yes_no(spec.get("movable", True), "movable"),
    }


def queue_words(waiting: int, wait: int | None) -> str:
    if not waiting:
        return "No queue when every copy is full: the engines queue the requests"
    how_long = f"{wait} s" if wait else "the reply wait"
    return f"Queue when every copy is full: up to {waiting} requests, each for {how_long}"


# How a routing policy is put in words after "Requests are now routed".
ROUTED_BY = {
    RoutingPolicy.LEAST_LOADED: "to the copy with the fewest in flight",
    RoutingPolicy.PREFIX: "to the copy that last served the prompt's beginning, load permitting",
    RoutingPolicy.SESSION: "to the copy each session used last, load permitting",
}


def stop(actor: Any, deployment: Deployment) -> Done:
    """Take every copy off its machine; the settings are kept."""
    if deployment.state in DEPLOYMENT_STOPPING_OR_STOPPED:
        raise ActionRefused(f"it is already {deployment.get_state_display().lower()}")
    with transaction.atomic():
        record(deployment, actor, "Stop")
        transitions.move_deployment(
            deployment.pk, DeploymentState.STOPPING, message="Stopping every copy.", actor=actor
        )
        for copy in deployment.copies.exclude(state__in=COPY_STOPPING_OR_STOPPED):
            lifecycle.leave(copy)
        lifecycle.enqueue("converge_deployment", deployment.pk)
    return Done(Deployment.objects.get(pk=deployment.pk), "Stopping every copy.")


# Start is for what an operator stopped; a FAILED one is tried again, failed copies included.
START_FAILED = "it failed: try it again with retry (Check now on its page), not start"


def start(actor: Any, deployment: Deployment) -> Done:
    """Place and load a stopped deployment again."""
    if deployment.state == DeploymentState.FAILED:
        raise ActionRefused(START_FAILED)
    if deployment.state != DeploymentState.STOPPED:
        raise ActionRefused("only a stopped deployment can be started")
    with transaction.atomic():
        record(deployment, actor, "Start")
        deployment.copies.filter(state=CopyState.STOPPED).delete()
        transitions.move_deployment(
            deployment.pk,
            DeploymentState.REQUESTED,
            message="Starting: placing the copies.",
            actor=actor,
        )
        lifecycle.enqueue("place_deployment", deployment.pk)
    return Done(Deployment.objects.get(pk=deployment.pk), "Starting again.")


DELETING = "Deleting: the copies stop, then the deployment goes. The model stays on this server."


def delete(actor: Any, deployment: Deployment) -> Done:
    """Stop it and remove it; the model stays on this server."""
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(delete_when_stopped=True)
        record(deployment, actor, "Delete")
        if deployment.state == DeploymentState.STOPPED:
            Deployment.objects.filter(pk=deployment.pk).delete()
            return Done(None, DELETING)
        if deployment.state != DeploymentState.STOPPING:
            transitions.move_deployment(
                deployment.pk,
                DeploymentState.STOPPING,
                message="Deleting: stopping every copy.",
                actor=actor,
            )
            for copy in deployment.copies.exclude(state__in=COPY_STOPPING_OR_STOPPED):
                lifecycle.stop_copy_soon(copy)
        lifecycle.enqueue("refresh_deployment", deployment.pk)
    return Done(Deployment.objects.filter(pk=deployment.pk).first(), DELETING)


def sync_files(actor: Any, deployment: Deployment) -> Done:
    """Copy the model's files to every ready machine of the cluster (or check them again)."""
    from deployments import machine_files

    with transaction.atomic():
        try:
            words = machine_files.request_sync(deployment)
        except machine_files.SyncRefused as refused:
            raise ActionRefused(str(refused)) from None
        record(deployment, actor, f"Sync: {words}")
    return Done(deployment, words)


def check_now(actor: Any, deployment: Deployment) -> Done:
    """Look at it at once; a FAILED deployment starts over."""
    with transaction.atomic():
        record(deployment, actor, "Check now")
        if deployment.state in DEPLOYMENT_GAVE_UP:
            lifecycle.start_over(deployment, "Checked: trying again.", actor)
        else:
            lifecycle.enqueue("check_deployment", deployment.pk)
    return Done(Deployment.objects.get(pk=deployment.pk), "Checking now.")


def retry(actor: Any, deployment: Deployment) -> Done:
    """Try a FAILED deployment again from the start, as Check now does on its page."""
    if deployment.state != DeploymentState.FAILED:
        state = deployment.get_state_display().lower()
        raise ActionRefused(f"only a failed deployment can be tried again; it is {state}")
    with transaction.atomic():
        record(deployment, actor, "Retry")
        lifecycle.start_over(deployment, "Trying again.", actor)
    return Done(Deployment.objects.get(pk=deployment.pk), "Trying again.")


# What the deployments list's bulk bar offers: one action, run on each selected deployment.
BULK_ACTIONS = {"stop": stop, "start": start, "check_now": check_now, "delete": delete}


@dataclass(frozen=True)
class Outcome:
    """One deployment's part of a bulk action: done (with what it did) or refused (why)."""

    name: str
    done: bool
    words: str


def bulk(actor: Any, action: str, deployments: list[Deployment]) -> list[Outcome]:
    """Run one action on each deployment on its own: one that refuses (already stopped, say)
    leaves the others done, and says why."""
    act = BULK_ACTIONS.get(action)
    if act is None:
        raise ActionRefused(f"no such action; use one of {', '.join(BULK_ACTIONS)}", "action")
    outcomes = []
    for deployment in deployments:
        try:
            outcomes.append(Outcome(deployment.name, True, act(actor, deployment).words))
        except ActionRefused as refused:
            outcomes.append(Outcome(deployment.name, False, refused.message))
    return outcomes


def deployments_using(row: ServerModel) -> list[str]:
    """Deployments that use a variant's files on this server: every one not stopped."""
    using = Deployment.objects.filter(variant_id=row.variant_id)
    return list(using.exclude(state=DeploymentState.STOPPED).values_list("name", flat=True))


def delete_server_files(actor: Any, row: ServerModel) -> Done:
    """Delete a variant's files from this server, never while a deployment uses them."""
    users = deployments_using(row)
    if users:
        raise downloads.DownloadRefused(
            f"Deployments use these files: {', '.join(sorted(users))}. Stop them first."
        )
    return Done(None, downloads.forget_files(row, actor))
