"""Reading and rewriting an engine's command line (an argument list, never a shell string), as
argparse reads it: ``--flag VALUE`` or ``--flag=VALUE``, the last one winning."""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag VALUE`` or ``--flag=VALUE`` (the last one wins, as in argparse)."""
    found = None
    for position, arg in enumerate(argv):
        if arg == flag and position + 1 < len(argv):
            found = argv[position + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def without_flag(argv: Sequence[str], flag: str) -> list[str]:
    """argv with every ``--flag VALUE`` and ``--flag=VALUE`` taken out."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            kept.append(arg)
    return kept


def with_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """argv with `flag` set to `value` (replaced where given, appended where not)."""
    return [*without_flag(argv, flag), flag, value]
