"""The Hugging Face hub: what a repository holds, and what went wrong, in words.

Every call goes through huggingface_hub with the endpoint read when the call is made
(`HF_ENDPOINT`, as huggingface_hub itself reads it): huggingface_hub reads it once at import,
and a mirror or the tests' emulated hub may be set later. A token is sent only when a team has
one (`token=False` otherwise, so a token lying in ~/.cache/huggingface is never used), and no
message or log line ever carries it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import httpx
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub import RepoFile as HubRepoFile
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from catalog.variants import RepoFile

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_S = 30.0
# The hub's own rules, as JSON Schema patterns too (the API states them in its schema): ASCII
# letters, digits and . _ - (and / in a revision), no ".." (nor "--" in a repository id), each
# part of owner/name at most 96 characters, ending in a letter, digit or _, and no .git at the
# end (huggingface_hub refuses those itself, with an error of its own).
REPO_ID_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID_PATTERN = rf"^(?!.*\.\.)(?!.*--)(?!.*\.git$){REPO_ID_PART}/{REPO_ID_PART}$"
REVISION_PATTERN = r"^(?!.*\.\.)(?:[A-Za-z0-9_][A-Za-z0-9_./-]{0,99})?$"
REPO_ID = re.compile(REPO_ID_PATTERN)
REVISION = re.compile(REVISION_PATTERN)


class HubProblem(Exception):
    """A repository cannot be read or downloaded; `message` says which and what to do."""

    NOT_FOUND = "not_found"
    GATED = "gated"
    TOKEN_REFUSED = "token_refused"
    REVISION = "revision_not_found"
    NO_WEIGHTS = "no_weights"
    BAD_CONFIG = "bad_config"
    UNREACHABLE = "unreachable"
    HUB_ERROR = "hub_error"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Access:
    """Whose token a call uses, for the words of a message (never the token in them)."""

    token: str = ""
    team_name: str = ""

    @classmethod
    def of_team(cls, team: Any) -> Access:
        """The team's Hugging Face token (none without a team: public models only)."""
        if team is None:
            return cls()
        return cls(token=team.hf_token(), team_name=team.name)

    def whose(self) -> str:
        return f"team {self.team_name}" if self.team_name else "your team"


@dataclass(frozen=True)
class Listing:
    """A repository at one commit: its files and what the hub says about it."""

    repo_id: str
    sha: str
    gated: bool
    license: str
    pipeline_tag: str
    base_model: str
    safetensors_total: int | None
    files: tuple[RepoFile, ...]


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def api(access: Access) -> HfApi:
    return HfApi(endpoint=endpoint(), token=access.token or False)


def valid_repo_id(repo_id: str) -> bool:
    return REPO_ID.fullmatch(repo_id) is not None


def valid_revision(revision: str) -> bool:
    return bool(revision) and REVISION.fullmatch(revision) is not None


# --- errors in words -------------------------------------------------------------------------


def gated_message(repo_id: str, access: Access) -> str:
    if not access.token:
        return (
            f"{repo_id} is gated: its files need a Hugging Face token with access. Ask a "
            f"platform admin to set the Hugging Face token of {access.whose()} (Admin → Teams), "
            f"accept the model's licence on huggingface.co/{repo_id} with that account, "
            "then select Try again."
        )
    return (
        f"{repo_id} is gated and the Hugging Face token of {access.whose()} has no access to "
        f"it: accept the model's licence on huggingface.co/{repo_id} with the account that "
        "owns the token (or ask a platform admin to set another token), then select Try again."
    )


def not_found_message(repo_id: str) -> str:
    return (
        f"{repo_id} was not found on Hugging Face: check the spelling (owner/name, as in "
        "huggingface.co/owner/name). A private repository looks the same without a token "
        "that may read it."
    )


def revision_message(repo_id: str, revision: str) -> str:
    return (
        f"{repo_id} has no revision “{revision}”: give a branch, tag or commit of that "
        "repository, or leave the revision empty for main."
    )


def http_problem(error: HfHubHTTPError, repo_id: str, access: Access) -> HubProblem:
    status = error.response.status_code if error.response is not None else 0
    if status == 401 and access.token:
        return HubProblem(
            HubProblem.TOKEN_REFUSED,
            f"The Hugging Face hub refused the token of {access.whose()} as invalid: ask a "
            "platform admin to set a new one (Admin → Teams), then select Try again.",
        )
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    return HubProblem(
        HubProblem.HUB_ERROR,
        f"The Hugging Face hub answered {status} for {repo_id} ({first_line}). "
        "Select Try again later; if it persists, check the hub's status page.",
    )


def problem_from(error: Exception, repo_id: str, revision: str, access: Access) -> HubProblem:
    """The words for an error huggingface_hub or the network raised."""
    if isinstance(error, HubProblem):
        return error
    if isinstance(error, LocalEntryNotFoundError) and isinstance(error.__cause__, Exception):
        # huggingface_hub wraps the hub's answer in "not in the local cache either".
        return problem_from(error.__cause__, repo_id, revision, access)
    if isinstance(error, GatedRepoError):  # before RepositoryNotFoundError: it subclasses it
        return HubProblem(HubProblem.GATED, gated_message(repo_id, access))
    if isinstance(error, RepositoryNotFoundError):
        return HubProblem(HubProblem.NOT_FOUND, not_found_message(repo_id))
    if isinstance(error, RevisionNotFoundError):
        return HubProblem(HubProblem.REVISION, revision_message(repo_id, revision or "main"))
    if isinstance(error, RemoteEntryNotFoundError):
        return HubProblem(
            HubProblem.HUB_ERROR,
            f"A file listed in {repo_id} is missing on the hub; select Try again later.",
        )
    if isinstance(error, HfHubHTTPError):
        return http_problem(error, repo_id, access)
    if isinstance(error, httpx.HTTPError | ConnectionError | TimeoutError):
        return HubProblem(
            HubProblem.UNREACHABLE,
            f"Cannot reach the Hugging Face hub at {endpoint()} ({type(error).__name__}: "
            f"{error}). Check this server's network access (or HF_ENDPOINT), then select "
            "Try again.",
        )
    raise error


# --- reading a repository --------------------------------------------------------------------


def card_value(card: Any, key: str) -> str:
    value = card.get(key) if isinstance(card, dict) else getattr(card, key, None)
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "")


def licence_of(info: Any) -> str:
    licence = card_value(info.card_data, "license") if info.card_data is not None else ""
    if licence:
        return licence
    tags = [t for t in (info.tags or []) if t.startswith("license:")]
    return tags[0].removeprefix("license:") if tags else ""


def listing_of(info: Any, files: list[RepoFile]) -> Listing:
    return Listing(
        repo_id=info.id,
        sha=info.sha,
        gated=bool(info.gated),
        license=licence_of(info)[:60],
        pipeline_tag=info.pipeline_tag or "",
        base_model=card_value(info.card_data, "base_model") if info.card_data else "",
        safetensors_total=info.safetensors.total if info.safetensors else None,
        files=tuple(files),
    )


def read_listing(repo_id: str, revision: str, access: Access) -> Listing:
    """The repository at `revision` (main when empty): its commit, files and card facts."""
    try:
        client = api(access)
        info = client.model_info(repo_id, revision=revision or None)
        tree = client.list_repo_tree(repo_id, revision=info.sha, recursive=True)
        files = [RepoFile(f.path, int(f.size)) for f in tree if isinstance(f, HubRepoFile)]
    except Exception as error:
        raise problem_from(error, repo_id, revision, access) from None
    return listing_of(info, files)


def read_json(repo_id: str, sha: str, filename: str, access: Access) -> dict[str, Any]:
    """A JSON file of the repository (config.json, tokenizer_config.json), without saving it."""
    url = hf_hub_url(repo_id, filename, revision=sha, endpoint=endpoint())
    headers = build_hf_headers(token=access.token or False)
    try:
        response = get_session().get(url, headers=headers, follow_redirects=True, timeout=TIMEOUT_S)
        hf_raise_for_status(response)
    except Exception as error:
        raise problem_from(error, repo_id, sha, access) from None
    try:
        loaded = json.loads(response.content)
    except ValueError as error:
        raise HubProblem(
            HubProblem.BAD_CONFIG,
            f"{filename} of {repo_id} is not valid JSON ({error}); Berth cannot read the "
            "model's shape from it. Pick a repository whose config.json transformers can load.",
        ) from None
    if not isinstance(loaded, dict):
        raise HubProblem(HubProblem.BAD_CONFIG, f"{filename} of {repo_id} is not a JSON object.")
    return loaded
