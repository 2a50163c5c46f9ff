"""Reads an engine's log lines the way vLLM writes them: level, time stamp and text.

vLLM's logger prints ``INFO 11-29 15:00:00 [api_server.py:1839] message`` (older builds have no
``[`` before the file name), V1 prefixes every line with its process, ``(APIServer pid=41) `` or
``(EngineCore_DP0 pid=42) ``, and a terminal may add ANSI colour codes. Uvicorn prints
``INFO:     Application startup complete.``; tracebacks and tqdm bars carry no level at all.

The stamp has no year and only whole seconds, so each record's time is made exact and unique
here: a line without a stamp takes its predecessor's time, and every line is at least one
microsecond after the one before. The same file therefore always yields the same times, and a
reader that asks for "everything after the last time I saw" gets exactly the new lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROCESS_PREFIX = re.compile(r"^\((?P<process>[\w.\-]+) pid=(?P<pid>\d+)\)\s?")
VLLM_LINE = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
    r"(?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[?[^\s\]]+:\d+\] "
)
UVICORN_LINE = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# The last line of a Python traceback: "torch.OutOfMemoryError: CUDA out of memory. …"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(:|$)")
SUPERVISOR_LINE = "berth supervisor:"
# What an engine prints once it accepts requests: vLLM's (Uvicorn's) and llama.cpp's server's.
# Uvicorn's access line: '127.0.0.1:58256 - "GET /health HTTP/1.1" 200 OK'.
ACCESS_LINE = re.compile(r'"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+" \d{3}')
SERVING_LINE = re.compile(r"Application startup complete|server is listening on http")
ONE_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class ParsedLine:
    """One line of engine output: its level, when it was written, and the text as printed."""

    level: str
    at: datetime
    text: str


@dataclass(frozen=True)
class LineState:
    """What reading a line needs from the lines before it; a cursor stores it between reads."""

    last_at: datetime
    in_traceback: bool = False


def strip_ansi(line: str) -> str:
    return ANSI_ESCAPE.sub("", line)


def strip_process_prefix(line: str) -> str:
    return PROCESS_PREFIX.sub("", line, count=1)


def stamp_to_datetime(stamp: str, reference: datetime) -> datetime:
    """``11-29 15:00:00`` in the engine's (this machine's) local time, in the reference's year.

    A stamp that would lie more than a day after the reference belongs to the year before (a log
    read in January that was written in December).
    """
    naive = datetime.strptime(f"{reference.year}-{stamp}", "%Y-%m-%d %H:%M:%S")
    stamped = naive.astimezone()  # a naive datetime is read as local time
    if stamped > reference + timedelta(days=1):
        stamped = naive.replace(year=reference.year - 1).astimezone()
    return stamped


def level_of(message: str, state: LineState) -> tuple[str, datetime | None, bool]:
    """The line's level, its stamp if it has one, and whether a traceback continues after it."""
    if match := VLLM_LINE.match(message):
        level = "WARNING" if match.group("level") == "WARN" else match.group("level")
        stamp = stamp_to_datetime(match.group("stamp"), state.last_at)
        return level, stamp, False
    if match := UVICORN_LINE.match(message):
        return match.group("level"), None, False
    if message.startswith("Traceback (most recent call last)"):
        return "ERROR", None, True
    if state.in_traceback and (message[:1].isspace() or message == ""):
        return "ERROR", None, True  # frames and source lines of a traceback
    if EXCEPTION_LINE.match(message) or message.startswith(SUPERVISOR_LINE):
        return "ERROR", None, False
    return "INFO", None, False  # tqdm bars and other plain prints


def parse_line(raw: str, state: LineState) -> tuple[ParsedLine, LineState]:
    """Parse one line (without its newline) given the state the previous lines left."""
    text = strip_ansi(raw).rstrip()
    level, stamp, in_traceback = level_of(strip_process_prefix(text), state)
    at = max(stamp or state.last_at, state.last_at + ONE_TICK)
    return ParsedLine(level, at, text), replace(state, last_at=at, in_traceback=in_traceback)


def parse_lines(lines: list[str], state: LineState) -> tuple[list[ParsedLine], LineState]:
    parsed: list[ParsedLine] = []
    for raw in lines:
        line, state = parse_line(raw, state)
        parsed.append(line)
    return parsed, state


def is_failure_line(text: str) -> bool:
    """A line worth quoting when an engine exits: an exception or the supervisor's own error."""
    message = strip_process_prefix(strip_ansi(text)).strip()
    if VLLM_LINE.match(message):
        message = VLLM_LINE.sub("", message, count=1)
    return bool(EXCEPTION_LINE.match(message)) or message.startswith(SUPERVISOR_LINE)


def last_telling_line(lines: list[str]) -> str:
    """The line worth quoting of a log tail: its root cause, else its last line that is not a
    request's access line (a health check's "GET /health 200" says nothing of the engine)."""
    telling = [line for line in lines if not ACCESS_LINE.search(line)]
    return root_cause_line(lines) or (telling[-1] if telling else "")


def says_serving(text: str) -> bool:
    """The engine's own word that it now accepts requests: worth a health look at once."""
    return bool(SERVING_LINE.search(text))


def root_cause_line(lines: list[str]) -> str:
    """The first exception line of a log tail, without prefixes; empty when there is none.

    The first, because vLLM prints the root cause before the errors it causes (a CUDA OOM in the
    engine core, then "Engine core initialization failed" in the API server).
    """
    for text in lines:
        if is_failure_line(text):
            message = strip_process_prefix(strip_ansi(text)).strip()
            return VLLM_LINE.sub("", message, count=1)
    return ""
