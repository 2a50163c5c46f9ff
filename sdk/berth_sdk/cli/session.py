"""berth login, logout and completion."""

from __future__ import annotations

import os
import sys

import click
from click.shell_completion import get_completion_class

from berth_sdk import config
from berth_sdk.client import BerthClient
from berth_sdk.errors import ConfigurationError

from .app import App, cli, output_option

DEFAULT_URL = "http://127.0.0.1:8000"
SHELLS = ("bash", "zsh", "fish")


def typed_key() -> str:
    """The key from a hidden prompt on a terminal, else the first line of standard input (a
    pipe or a file): never from the command line, where other users' `ps` would see it."""
    if sys.stdin.isatty():
        key = click.prompt(
            "API key (input hidden)", hide_input=True, default="", show_default=False
        )
    else:
        key = sys.stdin.readline()
    key = key.strip()
    if not key:
        raise click.UsageError(
            "no API key given: type it at the prompt, or pipe it in: "
            "berth login --url URL < file-with-the-key"
        )
    return str(key)


@cli.command(short_help="Check an API key and store it with the URL.")
@click.option("--url", help=f"the console's address, e.g. {DEFAULT_URL}")
@output_option
@click.pass_obj
def login(app: App, url: str | None) -> None:
    """Check an API key with the console and store it with its URL, readable by you only.

    The key is asked for (hidden), or read from standard input. BERTH_URL and BERTH_API_KEY,
    when set, win over what is stored."""
    if url is None:
        if not sys.stdin.isatty():
            raise click.UsageError("give the console's address: berth login --url URL")
        url = str(click.prompt("Console URL", default=DEFAULT_URL))
    try:
        address = config.normalized_url(url)
    except ConfigurationError as error:
        raise click.BadParameter(str(error), param_hint="--url") from None
    login = config.Login(address, typed_key())
    with BerthClient(base_url=login.url, api_key=login.api_key) as client:
        identity = client.me()
    path = config.store_login(login)
    if app.out.json:
        app.out.data({"url": login.url, "username": identity.username, "config": str(path)})
        return
    roles = ", ".join(f"{t.role} of {t.team}" for t in identity.teams) or "no team yet"
    app.out.line(f"Logged in to {login.url} as {identity.username} ({roles}).")
    app.out.line(f"Stored in {path} (readable by you only).")
    overriding = [
        name for name in (config.URL_VARIABLE, config.KEY_VARIABLE) if os.environ.get(name)
    ]
    if overriding:
        app.out.line(f"Note: {' and '.join(overriding)} set in this shell win over it.")


@cli.command()
@output_option
@click.pass_obj
def logout(app: App) -> None:
    """Forget the stored URL and key."""
    path = config.config_file()
    removed = config.forget_login(path)
    if app.out.json:
        app.out.data({"removed": removed, "config": str(path)})
    else:
        app.out.line(f"Removed {path}." if removed else "Not logged in: nothing to remove.")


@cli.command(short_help="Print the shell completion script.")
@click.argument("shell", type=click.Choice(SHELLS))
@output_option
@click.pass_obj
def completion(app: App, shell: str) -> None:
    """Print the shell's completion script: eval "$(berth completion bash)" in ~/.bashrc, the
    same with zsh in ~/.zshrc, or berth completion fish > ~/.config/fish/completions/berth.fish."""
    kind = get_completion_class(shell)
    assert kind is not None  # every shell of SHELLS has one
    script = kind(cli, {}, "berth", "_BERTH_COMPLETE").source()
    if app.out.json:
        app.out.data({"shell": shell, "script": script})
    else:
        click.echo(script)
