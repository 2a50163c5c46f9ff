"""What the deployments API reads: each field with its rules, which its OpenAPI schema states
from the same constants and checks as deployments.actions (the wizard's), so that a request the
schema allows is never refused by a rule, and one it refuses is refused in the actions' words
(a 422 naming the field). What depends on what is there (a name taken, a model not in the
catalog, no room, a setting of another vLLM version) is the actions' 400, or a 422 when the
model cannot have it (console/api_schema.py's InvalidForModel).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, Literal

from ninja import Field
from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

from catalog.api import RepoId, Revision
from console import api_schema
from console.api_schema import StrictSchema, Text, Whole
from console.models import SLUG_PATTERN
from deployments import actions, autoscaling
from deployments.actions import ActionRefused
from deployments.choices import RoutingPolicy
from deployments.engine import settings as engine_settings
from deployments.models import MOST_COPIES, MOST_WAITING, REPLY_WAIT_MAX_S, REPLY_WAIT_MIN_S


def ruled(check: Callable[[Any], Any]) -> AfterValidator:
    return api_schema.ruled(check, (ActionRefused,))


# --- a size: accelerators per copy ---------------------------------------------------------


def whole_numbers(most: int) -> str:
    """A regular expression for 1 to `most` as written plainly, e.g. 64:
    [1-9]|[1-5][0-9]|6[0-3]|64 (each shorter length, then each digit below `most`'s)."""
    digits = str(most)
    shorter = ["[1-9]" + "[0-9]" * (length - 1) for length in range(1, len(digits))]
    below = []
    for place, digit in enumerate(digits):
        lowest = 1 if place == 0 else 0
        if int(digit) > lowest:
            rest = "[0-9]" * (len(digits) - place - 1)
            below.append(f"{digits[:place]}[{lowest}-{int(digit) - 1}]{rest}")
    return "|".join([*shorter, *below, digits])


def share_digits(decimals: int) -> str:
    """1 to `decimals` digits, not all zero: by the place of the first one that is not."""
    after = [decimals - zeros - 1 for zeros in range(decimals)]
    return "|".join(
        f"{'0' * zeros}[1-9]" + (f"[0-9]{{0,{rest}}}" if rest else "")
        for zeros, rest in enumerate(after)
    )


# A size as text (how a client sends a Decimal exactly): a share such as 0.25 or .5, or a whole
# number of GPUs such as 2 or 2.0, never with more decimals than the column keeps.
SIZE_TEXT = (
    rf"^(0?\.({share_digits(actions.SIZE_DECIMALS)})"
    rf"|({whole_numbers(actions.MOST_ACCELERATORS_PER_COPY)})(\.0{{1,{actions.SIZE_DECIMALS}}})?)$"
)
SIZE_SCHEMA = {
    "anyOf": [
        {
            "type": "number",
            "exclusiveMinimum": 0,
            "exclusiveMaximum": 1,
            "multipleOf": 10**-actions.SIZE_DECIMALS,
        },
        {"type": "integer", "minimum": 1, "maximum": actions.MOST_ACCELERATORS_PER_COPY},
        {"type": "string", "pattern": SIZE_TEXT},
    ]
}
SIZE_HELP = (
    "accelerators per copy: a share 0 < s < 1 of one GPU (e.g. 0.25, 0.5; at most three "
    "decimals), 1, or a whole number n > 1 of GPUs of one machine (tensor parallel), at most "
    f"{actions.MOST_ACCELERATORS_PER_COPY}; as a number or as its text"
)
SIZE_LEFT_OUT = (
    "left out: the smallest usual size that holds one copy with its context on the cluster, "
    "so that models hosted the same way share a machine"
)


def plain_size_text(value: Any) -> Any:
    # Decimal() would also read " 2", "2e0" or "Infinity": text is a size only as SIZE_TEXT.
    if isinstance(value, str) and not re.fullmatch(SIZE_TEXT, value):
        raise ValueError(f"{value!r} is not a size: write it as 0.25, 0.5, 1, 2 …")
    return value


# The number as the client wrote it (0.1 stays 0.1); finite (JSON's 1e999 reads as infinity).
Size = Annotated[
    Decimal,
    BeforeValidator(plain_size_text),
    Field(strict=False, allow_inf_nan=False),
    ruled(actions.parse_size),
    WithJsonSchema(SIZE_SCHEMA),
]


# --- the other fields --------------------------------------------------------------------

Copies = Annotated[
    Whole,
    ruled(actions.parse_copies),
    Field(json_schema_extra={"minimum": 0, "maximum": actions.MOST_COPIES}),
]
COPIES_HELP = f"how many copies run, 0 to {actions.MOST_COPIES}"
ALLOW_MOVES_HELP = (
    "when its copies do not fit now: move copies of other deployments to make room, each "
    "started at its new place before the old one stops (what the fit check with allow_moves "
    "shows)"
)
ReplyWait = Annotated[
    Whole,
    ruled(actions.parse_reply_wait),
    Field(json_schema_extra={"minimum": REPLY_WAIT_MIN_S, "maximum": REPLY_WAIT_MAX_S}),
]
REPLY_WAIT_HELP = f"{REPLY_WAIT_MIN_S} to {REPLY_WAIT_MAX_S} s; null: the gateway's default"
Routing = Annotated[
    str, ruled(actions.parse_routing), Field(json_schema_extra={"enum": RoutingPolicy.values})
]
ROUTING_HELP = (
    "how the gateway picks a copy: least_loaded (the fewest requests in flight), prefix (the "
    "copy that last served the prompt's beginning, whose engine still caches it) or session "
    "(the copy the request's session used: its X-Berth-Session header, else `user`); prefix "
    "and session give way to load"
)
MaxWaiting = Annotated[
    Whole,
    ruled(actions.parse_max_waiting),
    Field(json_schema_extra={"minimum": 0, "maximum": MOST_WAITING}),
]
MAX_WAITING_HELP = (
    "when every copy is full (its engine's max_num_seqs in flight): how many requests may wait "
    f"at each gateway process, 0 (no queue: the engines queue them) to {MOST_WAITING}; past it "
    "a 429"
)
QueueWait = Annotated[
    Whole,
    ruled(actions.parse_queue_wait),
    Field(json_schema_extra={"minimum": 1, "maximum": REPLY_WAIT_MAX_S}),
]
QUEUE_WAIT_HELP = (
    f"how long a request may wait in that queue, 1 to {REPLY_WAIT_MAX_S} s (then a 503); null: "
    "as long as the reply wait"
)
DeploymentName = Annotated[
    str,
    ruled(actions.plain_name),
    Field(json_schema_extra={"maxLength": actions.LONGEST_NAME, "pattern": SLUG_PATTERN}),
]
ChatName = Annotated[
    str,
    ruled(lambda text: actions.printable(text, "chat_name", actions.LONGEST_CHAT_NAME)),
    Field(
        json_schema_extra={"maxLength": actions.LONGEST_CHAT_NAME, "pattern": actions.SHOWN_TEXT}
    ),
]
Comment = Annotated[
    str,
    ruled(actions.parse_comment),
    Field(json_schema_extra={"maxLength": actions.LONGEST_COMMENT, "pattern": actions.SHOWN_TEXT}),
]
CHAT_NAME_HELP = (
    "the name clients ask the gateway for (spaces around it are dropped); empty: not in chat"
)


def settings_shape(settings: Any) -> Any:
    try:
        return engine_settings.check_shape(settings)
    except engine_settings.EngineSettingsError as error:
        raise ActionRefused(str(error), "engine_settings") from None  # the setting named


EngineSettings = Annotated[
    dict[str, Any],
    ruled(settings_shape),
    WithJsonSchema(engine_settings.json_schema()),
]
SETTINGS_HELP = (
    "only what differs from the engine's defaults; parser names and other flags as the "
    "cluster's vLLM version takes them"
)
# Names looked up as they are: one that is not there is refused in words (400).
VariantName = Annotated[Text, Field(min_length=1, max_length=40)]
ClusterName = Annotated[Text, Field(min_length=1, max_length=63)]
TeamName = Annotated[Text, Field(min_length=1, max_length=63)]


# --- autoscaling: the bounds and target (deployments/autoscaling.py keeps the rules) ---------


def stated(lowest: int, highest: int) -> Any:
    """The range of a whole number as the schema states it: Whole's own reading (2.0 is 2)
    hides Field's bounds from the schema, so they are written in again."""
    return Field(ge=lowest, le=highest, json_schema_extra={"minimum": lowest, "maximum": highest})


LowestCopies = Annotated[Whole, stated(0, MOST_COPIES)]
HighestCopies = Annotated[Whole, stated(1, MOST_COPIES)]
Window = Annotated[Whole, stated(0, autoscaling.LONGEST_WINDOW_S)]
IdleMinutes = Annotated[Whole, stated(1, autoscaling.LONGEST_IDLE_MINUTES)]
Target = Annotated[
    float, Field(strict=False, gt=0, le=autoscaling.HIGHEST_TARGET, allow_inf_nan=False)
]


class AutoscalingIn(StrictSchema):
    """min_copies above max_copies is refused (400) naming min_copies, and idle_minutes with
    min_copies above 0 naming idle_minutes: rules between two fields, which a schema cannot
    state."""

    min_copies: LowestCopies = Field(
        description="the fewest copies; 0 is allowed, yet load alone never goes below 1"
    )
    max_copies: HighestCopies = Field(description="the most copies")
    target_in_flight: Target = Field(
        autoscaling.DEFAULT_TARGET_IN_FLIGHT,
        description="requests in flight and waiting per copy to aim at",
    )
    target_ttft_ms: Target | None = Field(
        None, description="one more copy while the first token takes longer; null: none"
    )
    up_window_s: Window | None = Field(
        None, description="seconds load must stay above before copies are added; null: default"
    )
    down_window_s: Window | None = Field(
        None, description="seconds load must stay below before a copy leaves; null: default"
    )
    idle_minutes: IdleMinutes | None = Field(
        None,
        description="with min_copies 0: minutes without a request after which it goes to zero "
        "copies (IDLE) until a request wakes it; null: never idle",
    )


class Commented(StrictSchema):
    """A change of what a deployment should be: its revision keeps why, where it is said."""

    comment: Comment = Field(
        "", description="why this change is made, kept with its revision (at most 500 characters)"
    )


class AutoscalingSetIn(Commented):
    autoscaling: AutoscalingIn | None = Field(
        description="the bounds and target; null: a fixed number (the one it has now)"
    )


# --- the requests ----------------------------------------------------------------------------

AUTO_ROLLBACK_HELP = (
    "true: a revision whose copies never serve is rolled back, by itself, to the last one "
    "that served"
)


class HostIn(Commented):
    model: RepoId = Field(description="the model's repository id, e.g. Qwen/Qwen3-8B")
    variant: VariantName | None = Field(
        None,
        description="a variant of the model, e.g. bf16; left out: the one that runs and fits "
        "there, one already on this server first",
    )
    cluster: ClusterName | None = Field(
        None, description="the cluster's name; left out: the first, by name, where a copy fits now"
    )
    team: TeamName | None = Field(
        None, description="optional when you are an operator of exactly one team"
    )
    name: DeploymentName | None = Field(
        None,
        description="lowercase letters, digits and dashes, e.g. qwen3-8b; left out: a unique "
        "name from the repository id",
    )
    copies: Copies = Field(1, description=COPIES_HELP)
    accelerators_per_copy: Size | None = Field(None, description=f"{SIZE_HELP}; {SIZE_LEFT_OUT}")
    engine_settings: EngineSettings = Field(default_factory=dict, description=SETTINGS_HELP)
    chat_name: ChatName = Field("", description=CHAT_NAME_HELP)
    reply_wait_s: ReplyWait | None = Field(None, description=REPLY_WAIT_HELP)
    routing: Routing = Field(RoutingPolicy.LEAST_LOADED.value, description=ROUTING_HELP)
    revision: Revision = Field("", description="a branch, tag or commit on Hugging Face")
    autoscaling: AutoscalingIn | None = Field(
        None, description="scale by itself between bounds; `copies` is then the starting number"
    )
    movable: bool = Field(
        True, description="false: re-packing never moves its copies to make room for another"
    )
    allow_moves: bool = Field(False, description=ALLOW_MOVES_HELP)
    auto_rollback: bool = Field(False, description=AUTO_ROLLBACK_HELP)


class ScaleIn(Commented):
    copies: Copies = Field(description=COPIES_HELP)
    accelerators_per_copy: Size | None = Field(None, description=f"{SIZE_HELP}; null: unchanged")
    allow_moves: bool = Field(False, description=ALLOW_MOVES_HELP)


class ChatNameIn(Commented):
    chat_name: ChatName = Field(description=CHAT_NAME_HELP)


class ReplyWaitIn(Commented):
    reply_wait_s: ReplyWait | None = Field(description=REPLY_WAIT_HELP)


class RoutingIn(Commented):
    routing: Routing = Field(description=ROUTING_HELP)


class QueueIn(Commented):
    max_waiting: MaxWaiting = Field(description=MAX_WAITING_HELP)
    queue_wait_s: QueueWait | None = Field(None, description=QUEUE_WAIT_HELP)


class EngineSettingsIn(Commented):
    engine_settings: EngineSettings = Field(description=SETTINGS_HELP)


class RollbackIn(Commented):
    revision: Annotated[Whole, stated(1, 2**31 - 1)] = Field(
        description="the number of the revision to make again (GET …/revisions lists them)"
    )


class AutoRollbackIn(StrictSchema):
    enabled: bool = Field(description=AUTO_ROLLBACK_HELP)


class FitCheckIn(StrictSchema):
    model: RepoId
    variant: VariantName
    cluster: ClusterName
    copies: Copies = Field(1, description=f"how many copies to place, 0 to {actions.MOST_COPIES}")
    accelerators_per_copy: Size | None = Field(None, description=f"{SIZE_HELP}; {SIZE_LEFT_OUT}")
    engine_settings: EngineSettings = Field(default_factory=dict, description=SETTINGS_HELP)
    allow_moves: bool = Field(
        False,
        description="when it does not fit now: also the fewest moves of other copies after "
        "which it would (nothing is moved)",
    )


class EstimateIn(StrictSchema):
    model: RepoId
    variant: VariantName
    engine_settings: EngineSettings = Field(default_factory=dict, description=SETTINGS_HELP)
    tensor_parallel: Whole = Field(1, ge=1, le=1024, description="GPUs one copy is split over")


# --- configuration as code: the file `berth export` writes and `berth apply` reads ----------
# (deployments/applying.py plans and carries it out; GET /api/v1/apply/schema publishes it)

MOST_APPLIED = 1000  # deployments in one file


# A limit of a deployment's quota in the file: gateway/quotas.py holds the rules (a domain this
# layer does not import), which an apply checks through the revisions' quota part.
QuotaLimit = Annotated[Whole, stated(1, 10**15)]


class QuotaLimitsIn(StrictSchema):
    """A deployment's quota in the file (at least one limit)."""

    tokens_per_day: QuotaLimit | None = None
    tokens_per_month: QuotaLimit | None = None
    requests_per_minute: QuotaLimit | None = None
    tokens_per_minute: QuotaLimit | None = None
    shadow: bool = Field(False, description="only count and report what it would refuse")


class ApplyDeployment(StrictSchema):
    """One deployment as the file names it: where it runs, then what it is asked to be."""

    name: DeploymentName = Field(description="its name; an apply finds it by this")
    team: TeamName = Field(description="the team that owns it (an apply never changes it)")
    model: RepoId = Field(description="the model's repository id (an apply never changes it)")
    cluster: ClusterName = Field(description="where it runs (an apply never changes it)")
    variant: VariantName
    revision: Revision = Field("", description="a branch, tag or commit on Hugging Face")
    accelerators_per_copy: Size = Field(description=SIZE_HELP)
    copies: Copies = Field(1, description=f"{COPIES_HELP}; left out under autoscaling")
    autoscaling: AutoscalingIn | None = Field(None, description="null: a fixed number")
    engine_settings: EngineSettings = Field(default_factory=dict, description=SETTINGS_HELP)
    chat_name: ChatName = Field("", description=CHAT_NAME_HELP)
    reply_wait_s: ReplyWait | None = Field(None, description=REPLY_WAIT_HELP)
    routing: Routing = Field(RoutingPolicy.LEAST_LOADED.value, description=ROUTING_HELP)
    max_waiting: MaxWaiting = Field(0, description=MAX_WAITING_HELP)
    queue_wait_s: QueueWait | None = Field(None, description=QUEUE_WAIT_HELP)
    movable: bool = Field(True, description="false: re-packing never moves its copies")
    auto_rollback: bool = Field(False, description=AUTO_ROLLBACK_HELP)
    quota: QuotaLimitsIn | None = Field(None, description="its quota; null: none")


class ApplyDocument(StrictSchema):
    version: Literal[1] = Field(description="the file format's version: 1")
    deployments: list[ApplyDeployment] = Field(max_length=MOST_APPLIED)


class ApplyIn(StrictSchema):
    document: ApplyDocument = Field(description="the file, as JSON (the CLI reads YAML)")
    dry_run: bool = Field(False, description="true: only the plan; nothing is changed")
    prune: bool = Field(
        False, description="true: delete the deployments of the file's teams that it does not name"
    )
