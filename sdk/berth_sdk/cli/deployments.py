"""berth deploy, ls, status, logs, scale, autoscale, route, queue, stop, start, retry, delete."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from berth_sdk.client import BerthClient
from berth_sdk.errors import DeploymentFailedError, DeploymentTimeoutError
from berth_sdk.results import Autoscaling, Deployment, HostedDeployment

from .app import App, cli, output_option
from .output import DeployProgress, Out, time_text

F = TypeVar("F", bound=Callable[..., Any])
POLL_S = 1.0
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ROUTING = ("least_loaded", "prefix", "session")


def size_of(_ctx: click.Context, param: click.Parameter, value: str | None) -> Decimal | None:
    """A copy's size as typed, kept exact (0.1 stays 0.1); the console checks what fits."""
    if value is None:
        return None
    try:
        size = Decimal(value.strip())
    except InvalidOperation:
        size = Decimal("NaN")
    if not size.is_finite() or size <= 0:
        raise click.BadParameter(
            f"{value!r} is not a size: give a share of one GPU (0.25, 0.5), 1, or a whole "
            "number of GPUs (2, 4, 8)",
            param=param,
        )
    return size


def size_option(default: str | None, help: str) -> Callable[[F], F]:
    return click.option(
        "--size",
        metavar="SIZE",
        default=default,
        show_default=default is not None,
        callback=size_of,
        help=help,
    )


def engine_setting(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(
            f"{text!r} is not KEY=VALUE; e.g. --set max_model_len=8192", param_hint="--set"
        )
    try:
        value = json.loads(raw)  # 8192, true, 0.9 and ["a"] as JSON; anything else as text
    except ValueError:
        value = raw
    return key.strip(), value


def engine_settings(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, Any]:
    return dict(engine_setting(value) for value in values)


def deployment_names(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a deployment's name: the names of your teams' deployments."""
    try:
        with BerthClient(timeout=3, max_retries=0) as client:
            found = client.serving.list_deployments(q=incomplete or None)
            return [CompletionItem(d.name) for d in found if d.name.startswith(incomplete)]
    except Exception:  # completion must never print an error into the shell's line
        return []


NAME = click.argument("name", shell_complete=deployment_names)
COMMENT = click.option(
    "--comment",
    default="",
    metavar="TEXT",
    help="why this change is made, kept with its revision (berth revisions NAME lists them)",
)


def say_deployment(out: Out, deployment: Deployment) -> None:
    size = f"{deployment.accelerators_per_copy:g}"
    out.pairs(
        [
            ("name", f"{deployment.name} (id {deployment.id}, team {deployment.team})"),
            ("state", deployment.state),
            ("message", deployment.last_message or "-"),
            ("model", f"{deployment.model} ({deployment.variant}, {deployment.engine})"),
            ("cluster", deployment.cluster),
            (
                "copies",
                f"{deployment.copies_ready} of {deployment.copies_wanted} ready, {size} "
                "accelerators each",
            ),  # fmt: skip
            ("autoscaling", autoscaling_words(deployment.autoscaling)),
            ("chat name", deployment.chat_name or "- (not in chat)"),
            ("routing", deployment.routing),
            ("queue", queue_words(deployment)),
            ("auto-rollback", "on" if deployment.auto_rollback else "off"),
            ("last error", error_words(deployment)),
        ]
    )
    if deployment.copies:
        out.line()
        out.table(
            ["COPY", "STATE", "MACHINE", "GPUS", "GIB", "ATTEMPTS", "ERROR"],
            [
                [
                    copy.ordinal,
                    copy.state,
                    copy.node_name or "-",
                    ",".join(map(str, copy.gpu_indexes)) or "-",
                    f"{copy.allocated_capacity_gb:.2f}",
                    copy.attempts,
                    copy.last_error_code or copy.pending_reason or "-",
                ]
                for copy in deployment.copies
            ],
        )


def queue_words(deployment: Deployment) -> str:
    if not deployment.max_waiting:
        return "none (the engines queue)"
    wait = f"{deployment.queue_wait_s} s" if deployment.queue_wait_s else "the reply wait"
    return f"up to {deployment.max_waiting} when every copy is full, each for {wait}"


def autoscaling_words(policy: Autoscaling | None) -> str:
    if policy is None:
        return "off (a fixed number of copies)"
    idle = f"; idle after {policy.idle_minutes} min" if policy.idle_minutes else ""
    return (
        f"{policy.min_copies} to {policy.max_copies} copies, aiming at "
        f"{policy.target_in_flight:g} requests in flight per copy{idle}"
    )


def error_words(deployment: Deployment) -> str:
    if not deployment.last_error_code:
        return "-"
    return f"{deployment.last_error_code}: {deployment.last_error_message}"


def curl_for(gateway_url: str, deployment: Deployment) -> str:
    """A request to paste: the key comes from the shell's BERTH_API_KEY, never printed."""
    body = {"model": deployment.served_as, "messages": [{"role": "user", "content": "Hello!"}]}
    return (
        f"curl {gateway_url}/chat/completions \\\n"
        '  -H "Authorization: Bearer $BERTH_API_KEY" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        f"  -d {shlex.quote(json.dumps(body))}"
    )


def say_chosen(out: Out, hosted: HostedDeployment) -> None:
    for field, choice in sorted(hosted.chosen.items()):
        out.line(f"Berth chose the {field}: {choice.why}")


def say_ready(out: Out, client: BerthClient, deployment: Deployment) -> dict[str, str]:
    gateway = client.gateway_url()
    endpoint = {"endpoint": f"{gateway}/chat/completions", "model": deployment.served_as}
    if not out.json:
        out.line(
            f"{deployment.name} is {deployment.state}: {deployment.copies_ready} of "
            f"{deployment.copies_wanted} copies serve on {deployment.cluster}."
        )
        out.line(f"Endpoint: {endpoint['endpoint']} (model {deployment.served_as!r})")
        out.line("Try it:")
        out.line(curl_for(gateway, deployment))
    return endpoint


def say_failure(out: Out, name: str, error: DeploymentFailedError) -> None:
    if out.json:
        return
    code = error.last_error_code or "no error code"
    out.line(f"{name} is {error.status}: {code}")
    if error.last_error_message:
        out.line(error.last_error_message)
    out.line(f"Its logs: berth logs {name}; after a fix: berth retry {name}")


@cli.command(short_help="Host a model and follow it to DEPLOYED.")
@click.argument("repo")
@click.option("--name", help="lowercase letters, digits and dashes; left out: from REPO")
@click.option("--variant", help="e.g. bf16, fp8; left out: one that runs and fits")
@click.option("--cluster", help="left out: the first cluster with room for a copy now")
@click.option("--copies", type=int, default=1, show_default=True, help="how many copies run")
@size_option(
    None,
    "accelerators per copy: a share (0.25, 0.5), 1, or whole GPUs (2, 4…); left out: the "
    "smallest usual size that holds one copy with its context on the cluster",
)
@click.option("--chat-name", help="the name people pick in chat and at the gateway")
@click.option(
    "--routing",
    type=click.Choice(ROUTING),
    help="how the gateway picks a copy  [default: least_loaded]",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    callback=engine_settings,
    help="an engine setting, e.g. --set max_model_len=8192 (repeat for more)",
)
@click.option("--min-copies", type=click.IntRange(0, 1000), help="autoscale: the fewest copies")
@click.option("--max-copies", type=click.IntRange(1, 1000), help="autoscale: the most copies")
@click.option(
    "--target",
    type=click.FloatRange(min=0, min_open=True),
    help="autoscale: requests in flight per copy to aim at (default 4)",
)
@click.option(
    "--idle-minutes",
    type=click.IntRange(1, 10080),
    help="autoscale: with a lowest of 0, zero copies after this many minutes without a request",
)
@COMMENT
@click.option("--no-wait", is_flag=True, help="return once the console has accepted it")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=3600,
    show_default=True,
    help="seconds to wait for DEPLOYED (then exit 4; the deployment goes on)",
)
@output_option
@click.pass_obj
def deploy(
    app: App,
    repo: str,
    name: str | None,
    variant: str | None,
    cluster: str | None,
    copies: int,
    size: Decimal | None,
    chat_name: str | None,
    routing: str | None,
    settings: dict[str, Any],
    min_copies: int | None,
    max_copies: int | None,
    target: float | None,
    idle_minutes: int | None,
    comment: str,
    no_wait: bool,
    timeout: float,
) -> None:
    """Host the model REPO (a repository id, e.g. Qwen/Qwen3-0.6B) and follow it to DEPLOYED.

    What is left out Berth chooses, and says why. On failure it prints the error code and
    the engine's line and exits 3; past --timeout it exits 4."""
    client, out = app.client(), app.out
    hosted = client.serving.host(
        repo_id=repo,
        variant=variant,
        cluster=cluster,
        copies=copies,
        accelerators_per_copy=size,
        chat_name=chat_name,
        engine_settings=settings or None,
        name=name,
        autoscaling=policy_of(min_copies, max_copies, target, idle_minutes),
        routing=routing,
        comment=comment,
    )
    deployment = client.serving.get_deployment(hosted.id)
    if not out.json:
        size_used = f"{deployment.accelerators_per_copy:g}"
        out.line(f"Hosting {deployment.name} (id {hosted.id}): {repo} {deployment.variant} on "
                 f"{deployment.cluster}, {copies} × {size_used}")  # fmt: skip
        say_chosen(out, hosted)
    if no_wait:
        if out.json:
            out.data({"deployment": deployment, "chosen": hosted.chosen})
        else:
            out.line(f"{deployment.name} is {deployment.state}; `berth status "
                     f"{deployment.name}` follows it.")  # fmt: skip
        return
    try:
        with DeployProgress(out) as progress:
            ready = client.serving.wait_deployment_ready(
                hosted.id, timeout, POLL_S, on_update=None if out.json else progress.update
            )
    except DeploymentFailedError as error:
        say_failure(out, deployment.name, error)
        raise
    except DeploymentTimeoutError:
        if not out.json:
            follow = f"berth status {deployment.name}, berth logs {deployment.name} -f"
            out.line(f"Still not ready after {timeout:g} s; it goes on. Follow it: {follow}")
        raise
    endpoint = say_ready(out, client, ready)
    if out.json:
        out.data({"deployment": ready, "chosen": hosted.chosen, **endpoint})


def policy_of(
    min_copies: int | None,
    max_copies: int | None,
    target: float | None,
    idle_minutes: int | None = None,
) -> Autoscaling | None:
    """--min-copies and --max-copies (both, or neither) ask for autoscaling."""
    if min_copies is None and max_copies is None:
        if target is not None or idle_minutes is not None:
            raise click.UsageError("--target and --idle-minutes need --min-copies and --max-copies")
        return None
    if min_copies is None or max_copies is None:
        raise click.UsageError("autoscaling needs both --min-copies and --max-copies")
    return Autoscaling(
        min_copies,
        max_copies,
        target if target is not None else 4.0,
        idle_minutes=idle_minutes,
    )


@cli.command("ls")
@click.option("--state", help="a state (DEPLOYED…) or a group: active, serving, failed, stopped")
@click.option("--cluster", help="only this cluster's")
@click.option("--search", help="text in the name or the chat name")
@output_option
@click.pass_obj
def list_deployments(app: App, state: str | None, cluster: str | None, search: str | None) -> None:
    """The deployments of your teams."""
    found = list(app.client().serving.list_deployments(state=state, cluster=cluster, q=search))
    if app.out.json:
        app.out.data(found)
        return
    if not found:
        app.out.line("No deployments. Host one: berth deploy REPO")
        return
    app.out.table(
        ["NAME", "STATE", "MODEL", "VARIANT", "CLUSTER", "READY", "CHAT NAME"],
        [
            [
                d.name,
                d.state,
                d.model,
                d.variant,
                d.cluster,
                f"{d.copies_ready}/{d.copies_wanted}",
                d.chat_name or "-",
            ]
            for d in found
        ],
    )


@cli.command()
@NAME
@output_option
@click.pass_obj
def status(app: App, name: str) -> None:
    """A deployment's state, message, last error and copies."""
    deployment = app.client().serving.get_deployment(name)
    if app.out.json:
        app.out.data(deployment)
    else:
        say_deployment(app.out, deployment)


@cli.command(short_help="A deployment's log lines; -f follows them.")
@NAME
@click.option("-f", "--follow", is_flag=True, help="keep printing new lines (Ctrl-C stops)")
@click.option("--stream", type=click.Choice(["engine", "serving"]), help="only this stream")
@click.option(
    "--level", type=click.Choice(LEVELS, case_sensitive=False), help="this level and above"
)
@output_option
@click.pass_obj
def logs(app: App, name: str, follow: bool, stream: str | None, level: str | None) -> None:
    """A deployment's log lines, oldest first (--output json: one JSON object a line)."""
    lines = app.client().serving.logs(
        name, follow=follow, stream=stream, level=level.upper() if level else None
    )
    try:
        for line in lines:
            if app.out.json:
                app.out.json_line(line)
            else:
                at = time_text(line.at)
                click.echo(f"{at} {line.machine or '-'} {line.stream} {line.level} {line.text}")
                sys.stdout.flush()
    except KeyboardInterrupt:
        return  # Ctrl-C is how following ends


@cli.command()
@NAME
@click.option("--copies", type=int, required=True, help="how many copies run, 0 to 1000")
@size_option(None, "accelerators per copy; left out: unchanged")
@COMMENT
@output_option
@click.pass_obj
def scale(app: App, name: str, copies: int, size: Decimal | None, comment: str) -> None:
    """Change how many copies run (and the size of each)."""
    said(app, app.client().serving.scale(name, copies, size, comment=comment), "Scaling")


@cli.command(short_help="Let a deployment scale itself between bounds (--off: fixed).")
@NAME
@click.option("--min", "min_copies", type=click.IntRange(0, 1000), help="the fewest copies")
@click.option("--max", "max_copies", type=click.IntRange(1, 1000), help="the most copies")
@click.option(
    "--target",
    type=click.FloatRange(min=0, min_open=True),
    help="requests in flight per copy to aim at (default 4)",
)
@click.option("--up-window", type=click.IntRange(0, 86400), help="seconds above before adding")
@click.option("--down-window", type=click.IntRange(0, 86400), help="seconds below before removing")
@click.option(
    "--idle-minutes",
    type=click.IntRange(1, 10080),
    help="with a lowest of 0: go to zero copies after this many minutes without a request",
)
@click.option("--off", is_flag=True, help="stop autoscaling: keep the number it has now")
@COMMENT
@output_option
@click.pass_obj
def autoscale(
    app: App,
    name: str,
    min_copies: int | None,
    max_copies: int | None,
    target: float | None,
    up_window: int | None,
    down_window: int | None,
    idle_minutes: int | None,
    off: bool,
    comment: str,
) -> None:
    """Let NAME scale itself between --min and --max copies, aiming at --target requests in
    flight per copy; copies that serve keep serving. With --min 0 and --idle-minutes it goes
    to zero copies when idle and wakes on the next request. --off turns it off."""
    if off:
        policy = None
    else:
        asked = policy_of(min_copies, max_copies, target, idle_minutes)
        if asked is None:
            raise click.UsageError("give --min and --max, or --off")
        policy = replace(asked, up_window_s=up_window, down_window_s=down_window)
    changed = app.client().serving.set_autoscaling(name, policy, comment=comment)
    said(app, changed, "Autoscaling" if policy else "Autoscaling off for")


@cli.command("route", short_help="How the gateway picks a copy: least_loaded, prefix or session.")
@NAME
@click.argument("policy", type=click.Choice(ROUTING))
@COMMENT
@output_option
@click.pass_obj
def route(app: App, name: str, policy: str, comment: str) -> None:
    """Route NAME's requests by POLICY: least_loaded (the copy with the fewest in flight),
    prefix (the copy that last served the prompt's beginning, which its engine still caches)
    or session (the copy the request's session used: its X-Berth-Session header, else the
    OpenAI `user`). prefix and session give way when that copy is busier than the others.
    The copies go on serving."""
    said(app, app.client().serving.set_routing(name, policy, comment=comment), "Routing")


@cli.command("queue", short_help="A queue at the gateway for when every copy is full.")
@NAME
@click.option("--max-waiting", type=int, required=True, help="requests that may wait (0: none)")
@click.option("--wait", "wait_s", type=int, help="seconds each may wait  [default: the reply wait]")
@COMMENT
@output_option
@click.pass_obj
def queue(app: App, name: str, max_waiting: int, wait_s: int | None, comment: str) -> None:
    """When every copy of NAME is full (its engine's max_num_seqs in flight), let up to
    --max-waiting requests wait at each gateway process, each for --wait seconds; past the
    queue a request gets 429, past its wait 503. --max-waiting 0: no queue."""
    queued = app.client().serving.set_queue(name, max_waiting, wait_s, comment=comment)
    said(app, queued, "Queue set for")


def said(app: App, deployment: Deployment, doing: str, to: str = "") -> None:
    """The deployment changed, as --output asks: "Routing NAME[ to…]. It is STATE: message"."""
    if app.out.json:
        app.out.data(deployment)
        return
    message = f": {deployment.last_message}" if deployment.last_message else ""
    app.out.line(f"{doing} {deployment.name}{to}. It is {deployment.state}{message}")


@cli.command(short_help="Stop every copy (start starts it again).")
@NAME
@output_option
@click.pass_obj
def stop(app: App, name: str) -> None:
    """Stop every copy; the deployment stays, and `berth start` starts it again."""
    said(app, app.client().serving.stop_deployment(name), "Stopping")


@cli.command()
@NAME
@output_option
@click.pass_obj
def start(app: App, name: str) -> None:
    """Start a stopped deployment again."""
    said(app, app.client().serving.start_deployment(name), "Starting")


@cli.command(short_help="Try a failed deployment again.")
@NAME
@output_option
@click.pass_obj
def retry(app: App, name: str) -> None:
    """Try a FAILED deployment again from the start (`berth start` is for a stopped one)."""
    said(app, app.client().serving.retry_deployment(name), "Retrying")


@cli.command(short_help="Stop and remove a deployment.")
@NAME
@click.option("--yes", "-y", is_flag=True, help="delete without asking")
@output_option
@click.pass_obj
def delete(app: App, name: str, yes: bool) -> None:
    """Stop every copy, then remove the deployment (the model stays on the server)."""
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"deleting {name} needs confirming: add --yes")
        click.confirm(f"Delete {name}? Its copies stop and it is removed", abort=True)
    deployment = app.client().serving.get_deployment(name)
    app.client().serving.delete_deployment(deployment)
    if app.out.json:
        app.out.data({"deleted": deployment.name, "id": deployment.id})
    else:
        app.out.line(f"Deleting {deployment.name}: its copies stop, then it is removed.")
