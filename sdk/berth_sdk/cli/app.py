"""The `berth` command group: its shared options, the client it builds, and how what goes wrong
becomes an exit status.

Exit statuses: 0 done; 1 an error (the console refused, with its words, or could not be
reached); 2 a usage error (a missing or malformed argument); 3 the deployment failed; 4 waiting
for it timed out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from berth_sdk import __version__
from berth_sdk.client import BerthClient
from berth_sdk.errors import (
    ApplyRefusedError,
    BerthAPIError,
    BerthError,
    ConfigurationError,
    DeploymentFailedError,
    DeploymentTimeoutError,
)
from berth_sdk.results import plain

from .output import Out

DONE, ERROR, USAGE, FAILED, TIMED_OUT = 0, 1, 2, 3, 4
F = TypeVar("F", bound=Callable[..., Any])
NOT_LOGGED_IN = (
    "not logged in: run `berth login`, or set BERTH_URL and BERTH_API_KEY "
    "(create a key under API keys in the console)"
)


class App:
    """What every command shares: the output wanted and the client, made when first needed."""

    def __init__(self) -> None:
        self.output = "text"
        self._client: BerthClient | None = None
        self._out: Out | None = None

    @property
    def out(self) -> Out:
        """How to write, made once the command's options are read (--output among them)."""
        if self._out is None:
            self._out = Out(json_output=self.output == "json")
        return self._out

    def client(self) -> BerthClient:
        if self._client is None:
            try:
                self._client = BerthClient()
            except ConfigurationError as error:
                if "no console URL" in str(error) or "no API key" in str(error):
                    raise ConfigurationError(NOT_LOGGED_IN) from None
                raise
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def app_of(ctx: click.Context) -> App:
    return ctx.ensure_object(App)


def set_output(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    app_of(ctx).output = value
    return value


def output_option(command: F) -> F:
    """--output text|json, on every command."""
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        expose_value=False,
        is_eager=True,
        callback=set_output,
        help="text for people, json for scripts",
    )(command)


def failure_report(error: BerthError) -> tuple[int, dict[str, Any]]:
    """The exit status of an error, and what --output json prints of it."""
    if isinstance(error, DeploymentFailedError):
        report = {"error": "deployment_failed", "message": str(error), **as_failure(error)}
        return FAILED, {**report, "deployment": plain(error.deployment)}
    if isinstance(error, DeploymentTimeoutError):
        body: dict[str, Any] = {"deployment_id": error.deployment_id, "status": error.status}
        return TIMED_OUT, {"error": "timed_out", "message": str(error), **body}
    if isinstance(error, BerthAPIError):
        body = {"status": error.status_code, "field": error.field}
        if isinstance(error, ApplyRefusedError):
            body["plan"] = plain(error.plan)
        return ERROR, {"error": "refused", "message": error.message, **body}
    return ERROR, {"error": "error", "message": str(error)}


def as_failure(error: DeploymentFailedError) -> dict[str, Any]:
    return {
        "deployment_id": error.deployment_id,
        "status": str(error.status),
        "last_error_code": error.last_error_code,
        "last_error_message": error.last_error_message,
    }


def said(error: BerthError) -> str:
    """The words a person reads on stderr."""
    if isinstance(error, BerthAPIError):
        about = f" [{error.field}]" if error.field else ""
        return f"the console refused (HTTP {error.status_code}){about}: {error.message}"
    return str(error)


class BerthGroup(click.Group):
    """Runs a command and turns the SDK's errors into their exit status and words."""

    def invoke(self, ctx: click.Context) -> Any:
        app = app_of(ctx)
        try:
            return super().invoke(ctx)
        except BerthError as error:
            status, report = failure_report(error)
            if app.output == "json":
                click.echo(json.dumps(plain(report), indent=2))
            else:
                click.echo(f"berth: {said(error)}", err=True)
            ctx.exit(status)
        finally:
            app.close()


@click.group(cls=BerthGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="berth")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Host and watch LLMs on your GPU clusters with Berth.

    Log in once with `berth login` (or set BERTH_URL and BERTH_API_KEY, which win over it).
    Exit status: 0 done, 1 error (the console refused, with its words), 2 usage,
    3 the deployment failed, 4 waiting timed out.
    """
    ctx.ensure_object(App)
