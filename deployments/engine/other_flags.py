"""The "Other flags" box: free text for any vLLM flag the editor has no control for.

The text is split as a POSIX shell would split it (shlex), and then every word is checked: only
flags of the cluster's vLLM version that were reviewed for Berth (deployments/engine/reviewed.py:
the allow-list, with the keys a JSON flag may set), each with a value of the right type; no word
on its own (a positional would replace the model), no NUL or line break, nothing that reads as
shell syntax. The argv is never run through a shell, so the checks are about what vLLM itself
would do with the words; refusing shell syntax as well keeps the stored text obviously harmless.

Every refusal names the word and says why.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import shlex
import unicodedata
from dataclasses import dataclass

from deployments.engine import reviewed
from deployments.engine.versions import FlagList, FlagSpec

MAX_CHARACTERS = 2000
MAX_WORDS = 64
MAX_VALUE = 500
LOOKALIKE_DASHES = "\u00ad\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
SHELL_CHARACTERS = "`$;|&<>\\"
HUMAN_READABLE_INTS = {"max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes"}


class OtherFlagsError(ValueError):
    """Other flags were refused; `problems` has one message per refused word."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0])
        self.problems = problems


@dataclass
class Reading:
    """The words read so far, and what was refused."""

    words: list[str]
    flags: FlagList
    problems: list[str]
    seen: set[str]
    position: int = 0


def check(text: str, flags: FlagList) -> list[str]:
    """The words of `text`, all checked; raises OtherFlagsError naming every refused word."""
    found = problems(text, flags)
    if found:
        raise OtherFlagsError(found)
    return shlex.split(text, posix=True)


def problems(text: str, flags: FlagList) -> list[str]:
    """Why `text` cannot be passed to vLLM, one message per problem; empty when it can."""
    if not isinstance(text, str):
        return ["must be text"]
    first = text_problem(text)
    if first:
        return [first]
    try:
        words = shlex.split(text, posix=True)
    except ValueError as error:
        return [f"cannot be split into words: {shell_error(error)}"]
    if len(words) > MAX_WORDS:
        return [f"has {len(words)} words; at most {MAX_WORDS}"]
    reading = Reading(words, flags, [], set())
    while reading.position < len(words):
        read_one(reading)
    return reading.problems


def text_problem(text: str) -> str:
    if len(text) > MAX_CHARACTERS:
        return f"is {len(text):,} characters long; at most {MAX_CHARACTERS:,}"
    if "\x00" in text:
        return "contains a NUL character"
    if "\n" in text or "\r" in text:
        return "contains a line break: put every flag on one line"
    return ""


def shell_error(error: ValueError) -> str:
    message = str(error)
    if "quotation" in message:
        return "a quote is left open"
    if "escape" in message:
        return "it ends with a lone backslash"
    return message


def quoted(word: str) -> str:
    shown = word if len(word) <= 60 else word[:57] + "…"
    return f"‘{shown}’"


def read_one(reading: Reading) -> None:
    word = reading.words[reading.position]
    reading.position += 1
    problem = word_problem(word)
    if problem:
        reading.problems.append(f"{quoted(word)} {problem}")
        return
    if not word.startswith("-") or word == "-":
        reading.problems.append(
            f"{quoted(word)} is a word on its own: vLLM would read it as the model to serve. "
            "Write flags as --name value"
        )
        return
    if word == "--":
        reading.problems.append(
            f"{quoted(word)} ends vLLM's flags: what follows would be read as the model"
        )
        return
    read_flag(reading, word)


def word_problem(word: str) -> str:
    """Characters no vLLM flag or value needs."""
    if word[:1] in LOOKALIKE_DASHES:
        name = unicodedata.name(word[0], "a look-alike dash")
        return f"starts with {name.lower()} (U+{ord(word[0]):04X}), not the ASCII '-' flags use"
    odd = next((c for c in word if not c.isascii() or not c.isprintable()), None)
    if odd is not None:
        return f"contains {describe(odd)}: flags and their values are plain ASCII"
    shell = next((c for c in word if c in SHELL_CHARACTERS), None)
    if shell is not None:
        return (
            f"contains {shell!r}, which is shell syntax (a command, a variable or a "
            "redirection): vLLM's flags never need it"
        )
    if len(word) > MAX_VALUE:
        return f"is {len(word)} characters long; at most {MAX_VALUE}"
    return ""


def describe(character: str) -> str:
    name = unicodedata.name(character, "a control character")
    return f"{name.lower()} (U+{ord(character):04X})"


def read_flag(reading: Reading, word: str) -> None:
    option, has_value, inline = word.partition("=")
    base, dot, key = option.partition(".")  # --json-flag.key value, -cc.key=value
    spec, negated = find_flag(reading.flags, base)
    if spec is None:
        reading.problems.append(unknown(word, base, reading.flags))
        skip_values(reading)
        return
    refusal = reviewed.refusal(spec.name)
    if refusal and not (negated and reviewed.turning_off_is_fine(spec.name)):
        reading.problems.append(f"{quoted(word)} cannot be set here: {refusal}")
        if not has_value and spec.takes_value:
            skip_values(reading, spec.multiple)
        return
    if dot and not takes_json(spec):
        reading.problems.append(f"{quoted(word)} sets a key of a flag that has none")
        skip_values(reading, spec.multiple)
        return
    setting = f"{spec.name}.{key}" if dot else spec.name
    if setting in reading.seen:
        reading.problems.append(f"{quoted(word)} is given twice")
    reading.seen.add(setting)
    values = take_values(reading, spec, inline if has_value else None, bool(dot), negated)
    if values is not None:
        check_values(reading, word, spec, values, key if dot else None)


def takes_json(spec: FlagSpec) -> bool:
    """JSON flags, and text flags whose text vLLM reads as JSON (--limit-mm-per-prompt)."""
    return spec.type == "json" or bool(reviewed.review_of(spec.name).keys)


def find_flag(flags: FlagList, option: str) -> tuple[FlagSpec | None, bool]:
    spec = flags.find(option)
    if spec is not None:
        return spec, option.startswith("--no-") and spec.type == "bool"
    if option.startswith("--no-"):
        positive = flags.find("--" + option[5:])
        if positive is not None and positive.negatable:
            return positive, True
    return None, False


def unknown(word: str, option: str, flags: FlagList) -> str:
    close = difflib.get_close_matches(option, list(flags.table), n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{quoted(word)} is not a flag of vLLM {flags.version}{hint}"


def skip_values(reading: Reading, many: bool = True) -> None:
    """After a refused flag, its values are not read again as words on their own."""
    while reading.position < len(reading.words) and not looks_like_flag(
        reading.words[reading.position]
    ):
        reading.position += 1
        if not many:
            return


def looks_like_flag(word: str) -> bool:
    return word.startswith("-") and not is_number(word)


def is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def take_values(
    reading: Reading, spec: FlagSpec, inline: str | None, dotted: bool, negated: bool
) -> list[str] | None:
    """The values that belong to the flag; None (with a problem noted) when they are wrong."""
    flag = spec.long
    if spec.type == "bool" and not dotted:
        if inline is not None:
            reading.problems.append(f"‘{flag}’ is a switch and takes no value (‘{inline}’)")
            return None
        return []
    if negated:
        reading.problems.append(f"‘{flag}’ cannot be negated")
        return None
    if inline is not None:
        return [inline]
    values = []
    while reading.position < len(reading.words) and not looks_like_flag(
        reading.words[reading.position]
    ):
        values.append(reading.words[reading.position])
        reading.position += 1
        if not spec.multiple:
            break
    if not values:
        reading.problems.append(f"‘{flag}’ needs a value")
        return None
    return values


def check_values(
    reading: Reading, word: str, spec: FlagSpec, values: list[str], key: str | None
) -> None:
    for value in values:
        problem = word_problem(value)
        found = [problem] if problem else value_problems(spec, value, key)
        reading.problems += [f"{quoted(value)} for {quoted(word)} {p}" for p in found]


def value_problems(spec: FlagSpec, value: str, key: str | None) -> list[str]:
    """Whether vLLM's parser would take `value` for this flag, and Berth's review would too."""
    if key is not None:
        return reviewed.key_problems(spec.name, key, reviewed.dotted_value(value))
    if takes_json(spec):
        try:
            parsed = json.loads(value)
        except ValueError:
            return ["must be JSON, e.g. '{\"key\": 1}'"]
        return reviewed.json_problems(spec.name, parsed)
    if spec.choices and value not in spec.choices:
        return [f"must be one of {', '.join(spec.choices)}"]
    problem = reviewed.value_problem(spec.name, value, is_text=spec.type == "str")
    if not problem:
        problem = TYPE_CHECKS.get(spec.type, lambda _s, _v: "")(spec, value)
    return [problem] if problem else []


def int_problem(spec: FlagSpec, value: str) -> str:
    pattern = r"-?\d+(\.\d+)?[kKmMgG]?" if spec.name in HUMAN_READABLE_INTS else r"-?\d+"
    if re.fullmatch(pattern, value) or (spec.name == "max_model_len" and value == "auto"):
        return ""
    return "must be a whole number"


def float_problem(_spec: FlagSpec, value: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return "must be a number"
    return "" if math.isfinite(number) else "must be a finite number"


TYPE_CHECKS = {"int": int_problem, "float": float_problem}
