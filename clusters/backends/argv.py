"""Reading and rewriting an engine's command line (an argument list, never a shell string), as
argparse reads it: ``--flag VALUE`` or ``--flag=VALUE``, the last one winning."""

from __future__ import annotations

from collections.abc import Sequence

KEY_FLAG = "--api-key"
KEY_SHOWN = "********"  # what pages and records show for the key


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


def without_key(argv: Sequence[str]) -> list[str]:
    """argv with the value of every ``--api-key VALUE`` and ``--api-key=VALUE`` hidden, for
    pages, logs and records on disk (the same two forms the engine reads)."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(KEY_SHOWN)
            hide_next = False
        elif arg == KEY_FLAG:
            shown.append(arg)
            hide_next = True
        elif arg.startswith(KEY_FLAG + "="):
            shown.append(f"{KEY_FLAG}={KEY_SHOWN}")
        else:
            shown.append(arg)
    return shown
