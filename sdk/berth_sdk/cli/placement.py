"""berth models, estimate, fit: what the catalog holds and whether a model fits."""

from __future__ import annotations

from decimal import Decimal

import click

from berth_sdk.results import Estimate, plain

from .app import App, cli, output_option
from .deployments import size_option
from .output import Out


@cli.command(short_help="The models this console knows.")
@click.option("--search", help="text in the repository id, the name or the family")
@output_option
@click.pass_obj
def models(app: App, search: str | None) -> None:
    """The models this console knows, with their variants (* : its files are on this server)."""
    found = list(app.client().models.list(search=search))
    if app.out.json:
        app.out.data(found)
        return
    if not found:
        app.out.line("No model matches." if search else "The catalog is empty.")
        return
    app.out.table(
        ["REPO", "FAMILY", "CONTEXT", "VARIANTS"],
        [
            [
                model.repo_id,
                model.family,
                model.max_context,
                ", ".join(
                    f"{v.name}{'*' if v.on_this_server else ''} {v.size_gb:.2f} GiB"
                    for v in model.variants
                ),
            ]
            for model in found
        ],
    )


def say_estimate(out: Out, estimate: Estimate) -> None:
    out.table(
        ["PART", "GIB"],
        [
            ["weights", f"{estimate.weights_gb:.2f}"],
            ["KV cache (one request)", f"{estimate.kv_cache_gb:.2f}"],
            ["activations", f"{estimate.activations_gb:.2f}"],
            ["overhead", f"{estimate.overhead_gb:.2f}"],
            ["total per GPU", f"{estimate.total_gb:.2f}"],
        ],
    )
    out.line(
        f"{estimate.total_bytes:,} bytes on each of {estimate.tensor_parallel} GPU(s), at "
        f"{estimate.max_model_len:,} tokens of context"
    )


@cli.command(short_help="The GPU memory one copy needs, in parts.")
@click.argument("repo")
@click.option("--variant", help="left out: the first on this server, else the smallest")
@click.option("--context", type=click.IntRange(min=1), help="the longest conversation, in tokens")
@output_option
@click.pass_obj
def estimate(app: App, repo: str, variant: str | None, context: int | None) -> None:
    """The GPU memory one copy of REPO needs, in parts."""
    result = app.client().serving.estimate(repo, variant, context)
    if app.out.json:
        app.out.data(result)
    else:
        say_estimate(app.out, result)


@cli.command(short_help="Whether copies fit on a cluster, and why not.")
@click.argument("repo")
@click.option("--cluster", required=True, help="the cluster's name")
@size_option(
    None,
    "accelerators per copy: a share (0.25, 0.5), 1, or whole GPUs; left out: the smallest "
    "usual size that holds one copy with its context",
)
@click.option("--copies", type=int, default=1, show_default=True, help="how many copies")
@click.option("--variant", help="left out: the first on this server, else the smallest")
@click.option("--context", type=click.IntRange(min=1), help="the longest conversation, in tokens")
@output_option
@click.pass_obj
def fit(
    app: App,
    repo: str,
    cluster: str,
    size: Decimal | None,
    copies: int,
    variant: str | None,
    context: int | None,
) -> None:
    """Whether copies of REPO fit on a cluster now, where they would go, and why not."""
    result = app.client().serving.fit_check(
        repo, cluster, variant, copies, size, max_model_len=context
    )
    if app.out.json:
        app.out.data({**plain(result), "fits": result.fits, "reason": result.reason})
        return
    out = app.out
    verdict = "fits" if result.fits else "does not fit"
    out.line(
        f"{repo} {verdict} on {cluster}: room for {result.fit_now} cop(ies) of {size:g} now, "
        f"{result.fit_empty} on the empty cluster; {result.estimate.total_gb:.2f} GiB per GPU"
    )
    for placed in result.placed:
        where = ",".join(map(str, placed.accelerators))
        slice_ = f" slice {placed.slice}" if placed.slice else ""
        out.line(f"  copy {placed.copy_number}: {placed.machine} GPU {where}{slice_}, "
                 f"{placed.allocated_capacity_gb:.2f} GiB")  # fmt: skip
    for missing in result.not_placed:
        out.line(f"  copy {missing.copy_number} does not fit ({missing.reason}): {missing.message}")
    for notice in result.notices:
        out.line(f"  note: {notice}")
