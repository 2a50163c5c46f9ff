"""`python -m placement plan|estimate [FILE|-]`: one scenario in, JSON out.

Exit status 0 when the input is a valid scenario (even if nothing fits), 2 with a one-line
`error: <field>: <problem>` on stderr when it is not.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from placement.estimate import estimate_copy
from placement.fit import plan
from placement.repack import plan_with_moves
from placement.scenario import (
    Json,
    ScenarioError,
    estimate_to_json,
    repack_to_json,
    result_to_json,
    scenario_from_json,
)

INVALID_INPUT = 2


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m placement",
        description="Check where a model's copies fit on a cluster (GiB are 2**30 bytes).",
    )
    commands = top.add_subparsers(dest="command", required=True)
    for name, text in (
        ("plan", "place the request's copies on the cluster and print the plan"),
        ("estimate", "print the memory one copy needs per GPU, in parts"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("file", nargs="?", default="-", help="scenario JSON; - for stdin")
    return top


def read_scenario_text(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    with open(path, encoding="utf-8") as file:
        return file.read()


def run(command: str, data: object) -> Json:
    scenario = scenario_from_json(data, need_cluster=command == "plan")
    request = scenario.request
    if command == "estimate":
        return estimate_to_json(
            estimate_copy(request.model, request.engine, request.tensor_parallel)
        )
    assert scenario.inventory is not None  # scenario_from_json requires it for plan
    if request.allow_moves:
        return repack_to_json(plan_with_moves(scenario.inventory, request))
    return result_to_json(plan(scenario.inventory, request))


def main(
    argv: list[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    args = parser().parse_args(argv)
    try:
        data = json.loads(read_scenario_text(args.file, stdin))
        output = run(args.command, data)
    except OSError as error:
        return _fail(stderr, f"cannot read {args.file}: {error.strerror or error}")
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        return _fail(stderr, f"input is not valid JSON: {error.msg} at {where}")
    except ScenarioError as error:
        return _fail(stderr, str(error))
    json.dump(output, stdout, indent=2)
    stdout.write("\n")
    return 0


def _fail(stderr: TextIO, message: str) -> int:
    stderr.write(f"error: {' '.join(message.split())}\n")  # always one line
    return INVALID_INPUT
