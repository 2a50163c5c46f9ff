"""berth chat: talk to a deployment through the gateway, the reply streaming in as it comes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from berth_sdk.errors import BerthError

from .app import App, cli, output_option
from .deployments import NAME

if TYPE_CHECKING:
    import openai


def turns(message: str | None) -> Iterator[str]:
    """What the user says: the MESSAGE given; else, on a terminal, what is typed at the prompt
    until an empty line or Ctrl-D; else each line of standard input."""
    if message is not None:
        yield message
        return
    interactive = sys.stdin.isatty()
    if interactive:
        click.echo("Chatting; an empty line or Ctrl-D ends.", err=True)
    while True:
        try:
            text = input("> ") if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and not text:
            return  # the end of the input
        text = text.strip()
        if interactive and not text:
            return
        if text:
            yield text


def gateway_refusal(error: Exception, gateway: str) -> BerthError:
    import openai

    if isinstance(error, openai.APIStatusError):
        body = error.body if isinstance(error.body, dict) else {}
        message = body.get("message") or error.message
        return BerthError(f"the gateway refused (HTTP {error.status_code}): {message}")
    return BerthError(f"cannot reach the gateway at {gateway}: {error}")


def streamed_reply(
    ai: openai.OpenAI, name: str, history: list[Any], max_tokens: int | None, echo: bool
) -> str:
    create = ai.chat.completions.create
    if max_tokens is None:
        stream = create(model=name, messages=history, stream=True)
    else:
        stream = create(model=name, messages=history, stream=True, max_tokens=max_tokens)
    parts: list[str] = []
    for chunk in stream:
        text = chunk.choices[0].delta.content if chunk.choices else None
        if text:
            parts.append(text)
            if echo:
                click.echo(text, nl=False)
                sys.stdout.flush()
    if echo:
        click.echo()
    return "".join(parts)


@cli.command(short_help="Chat with a deployment through the gateway.")
@NAME
@click.argument("message", required=False)
@click.option("--max-tokens", type=click.IntRange(min=1), help="the longest reply, in tokens")
@output_option
@click.pass_obj
def chat(app: App, name: str, message: str | None, max_tokens: int | None) -> None:
    """Chat with NAME (a chat name or a deployment's name): one MESSAGE, or a conversation
    when none is given. Needs the openai extra: pip install 'berth-sdk[openai]'."""
    client = app.client()
    gateway = client.gateway_url()
    ai = client.openai(max_retries=1)  # without the openai package: an error saying so
    import openai

    history: list[Any] = []
    for text in turns(message):
        history.append({"role": "user", "content": text})
        try:
            reply = streamed_reply(ai, name, history, max_tokens, echo=not app.out.json)
        except (openai.APIStatusError, openai.APIConnectionError) as error:
            raise gateway_refusal(error, gateway) from None
        history.append({"role": "assistant", "content": reply})
        if app.out.json:
            app.out.json_line({"model": name, "message": text, "reply": reply})
