"""Local engines run as unprivileged users, one per team (DESIGN §8b: engines are untrusted).

When the console runs as root (as the embedded PostgreSQL's user is made), each team gets a
system user of its own, `berth-<team>-<hash>`, and each copy a working folder of its own under
the state folder, owned by that user and closed to others: its HOME, TMPDIR and caches
(VLLM_CACHE_ROOT, HF_HOME, XDG_CACHE_HOME) live there. So an engine cannot read the console's
keys (var/keys.json, 0600), its environment (/proc/<pid>/environ of another user), another
team's engines, their folders or the copies' records and logs (0700, the console's), and it
reads the model files without being able to change them (they are the console's). Each engine
listens on a Unix socket in its own temporary folder (socket_path), which no other engine user
may enter: only the console and the gateway (as root) connect to it. Engines of one team share
a user: they trust each other.

The engine's program and model files must be reachable by that user: every folder above a path
on its command line gets the search (x) permission for others, as the PostgreSQL data folder's
parents do, and the model's files (CopySpec.model_files) become readable, never writable.

When the console does not run as root it cannot switch users: engines then run as the console's
own user, and the cluster's page says they are not isolated.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

USER_PREFIX = "berth-"
HOMES = "engine-homes"
NOT_ISOLATED = (
    "Engines on this machine run as the console's own user, not one unprivileged user per team: "
    "Berth is not running as root, so it cannot switch users. They can read each other's files "
    "and the console's; run Berth as root (it creates the users) to isolate them."
)
ISOLATED = (
    "Engines on this machine run as one unprivileged user per team, each copy in a folder of "
    "its own: they cannot read the console's keys, its environment or another team's engines."
)
SOCKETS_FENCED = (
    "Engines on this machine listen on Unix sockets, not ports: only the console, the gateway "
    "and the engine's own user can connect to one."
)
SOCKETS_OPEN = (
    "Engines on this machine listen on Unix sockets that every engine can connect to, as they "
    "all run as the console's user: vLLM refuses /v1 requests without the copy's own key, but "
    "its other routes (/tokenize, /pause …) answer any of them."
)


@dataclass(frozen=True)
class EngineUser:
    name: str
    uid: int
    gid: int


def can_switch_users() -> bool:
    return os.geteuid() == 0 and shutil.which("useradd") is not None


def user_name(team: str) -> str:
    """A valid system user name for the team (at most 32 characters), unique by its hash."""
    slug = re.sub(r"[^a-z0-9]+", "-", team.lower()).strip("-")[:14] or "team"
    digest = hashlib.sha256(team.encode()).hexdigest()[:6]
    return f"{USER_PREFIX}{slug}-{digest}"


def engine_user(team: str) -> EngineUser | None:
    """The team's engine user, created on first use; None where users cannot be switched."""
    if not can_switch_users():
        return None
    name = user_name(team or "no-team")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
            check=True, capture_output=True,
        )  # fmt: skip
        entry = pwd.getpwnam(name)
    return EngineUser(name, entry.pw_uid, entry.pw_gid)


def searchable_by_others(path: Path) -> None:
    """Give every folder from `path` up the search permission (x) for others, nothing more."""
    for folder in [path, *path.parents] if path.is_dir() else list(path.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


def readable_by_others(path: Path) -> None:
    """Files others may read (never write); folders they may list and enter."""
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for each in paths:
        if each.is_symlink():
            continue
        wanted = stat.S_IROTH | (stat.S_IXOTH if each.is_dir() else 0)
        mode = each.stat().st_mode
        if mode & wanted != wanted:
            each.chmod(mode | wanted)


def make_reachable(argv: Sequence[str], model_files: str) -> None:
    """The program and the model's files can be reached by the engine user: every folder on
    the way to a path on the command line can be entered, and the model's files (the console's,
    under its models folder) become readable; none becomes writable."""
    for word in argv:
        for candidate in (word, word.partition("=")[2]):
            if not candidate.startswith("/"):
                continue
            # A path that is not there yet: its folders, so that the engine finds it missing
            # (as it would as the console's user), not forbidden.
            found = next(p for p in [Path(candidate), *Path(candidate).parents] if p.exists())
            searchable_by_others(found)
            searchable_by_others(found.resolve())  # a link's target too
    if model_files and Path(model_files).exists():
        readable_by_others(Path(model_files).resolve())


def private_folder(folder: Path, user: EngineUser | None) -> Path:
    """An empty folder only `user` (None: this process's own user) may enter; what an earlier
    launch left is gone."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    if user is not None:
        os.chown(folder, user.uid, user.gid)
    return folder


def shared_parent(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)  # others may enter a folder they know the name of, not list it
    searchable_by_others(folder)
    return folder


def working_folder(state_dir: Path, copy_id: int, user: EngineUser) -> Path:
    """A fresh folder for one launch of the copy, the engine user's only and nobody else's."""
    home = private_folder(shared_parent(state_dir / HOMES) / str(copy_id), user)
    private_folder(home / "cache", user)
    return home


def temporary_path(state_dir: Path, copy_id: int) -> Path:
    """The copy's temporary folder, under the system's /tmp: vLLM puts its ZeroMQ sockets
    there, and the engine its own socket, whose paths may not be longer than 107 bytes, which
    a state folder deep in a tree can exceed."""
    place = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / "berth-engines" / f"{place}-{copy_id}"


def temporary_folder(state_dir: Path, copy_id: int, user: EngineUser | None) -> Path:
    """The copy's temporary folder, made afresh for one launch: the engine user's only (None:
    the console's own user's, where engines run as it)."""
    folder = temporary_path(state_dir, copy_id)
    shared_parent(folder.parent)
    return private_folder(folder, user)


def socket_path(state_dir: Path, copy_id: int) -> Path:
    """Where a local engine listens: a Unix socket in its temporary folder, which only its own
    user (and the console, as root) may enter: no other team's engine can connect to it."""
    return temporary_path(state_dir, copy_id) / "engine.sock"


def environment(home: Path, tmp: Path, user: EngineUser) -> dict[str, str]:
    """Where the engine writes: its working folder and its own temporary folder only."""
    cache = home / "cache"
    return {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CACHE_HOME": str(cache),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "HF_HOME": str(cache / "huggingface"),
        "USER": user.name,
        "LOGNAME": user.name,
    }


def status_words() -> list[str]:
    """What the cluster page says of local engines' isolation."""
    if can_switch_users():
        return [ISOLATED, SOCKETS_FENCED]
    return [NOT_ISOLATED, SOCKETS_OPEN]
