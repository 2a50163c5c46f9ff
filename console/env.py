"""Small readers of environment variables that fail loudly, naming the variable, on a bad value."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise ImproperlyConfigured(f"{name} is not set. Set it in the environment (see README).")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use true or false (or 1 / 0).")


def env_int(name: str, default: int, *, low: int | None = None, high: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ImproperlyConfigured(f"{name}={value} is outside {low}..{high}.")
    return value


def env_float(
    name: str, default: float, *, low: float | None = None, high: float | None = None
) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ImproperlyConfigured(f"{name}={value:g} is outside {low:g}..{high:g}.")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(name: str) -> dict[str, object]:
    """Django's DATABASES entry from a postgresql://user:password@host:port/dbname URL."""
    raw = env_str(name)
    hint = "expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} is malformed: {hint}.") from None
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(f"{name} must use postgresql://, {hint}.")
    database = parts.path.lstrip("/")
    if not parts.hostname or not database or "/" in database:
        raise ImproperlyConfigured(f"{name} is missing a host or a database name: {hint}.")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(database),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname,
        "PORT": str(port or 5432),
        "CONN_MAX_AGE": 0,
    }


def redis_url(name: str) -> str:
    raw = env_str(name)
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ImproperlyConfigured(f"{name} is malformed: expected redis://HOST:PORT/DB.") from None
    if parts.scheme not in {"redis", "rediss"} or not parts.hostname:
        raise ImproperlyConfigured(f"{name} is malformed: expected redis://HOST:PORT/DB.")
    return raw


# In a parallel test run, pytest-xdist names each worker (gw0, gw1, …) in this variable, and every
# process a test starts inherits it: each worker then has Redis, queues and folders of its own.
TEST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def for_test_worker(value: str) -> str:
    """`value`, with the test worker's name appended in a parallel test run."""
    return f"{value}-{TEST_WORKER}" if TEST_WORKER else value


def redis_for_test_worker(url: str) -> str:
    """`url` on a Redis database of the test worker's own in a parallel test run (gw0 → 1, gw1 →
    2, …; Redis has 16), so that its locks, reports and heartbeats meet no other worker's."""
    if not TEST_WORKER:
        return url
    return urlunsplit(urlsplit(url)._replace(path=f"/{1 + int(TEST_WORKER.removeprefix('gw'))}"))


def env_executable(name: str) -> str:
    """An optional path to a program: "" when unset; else it must be an executable file."""
    path = os.environ.get(name, "").strip()
    if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ImproperlyConfigured(
            f"{name}={path!r} is not an executable file: give the engine binary's path, "
            "or unset it to use the one `make engines` installs."
        )
    return path


def env_readable_file(name: str) -> str:
    """An optional path to a file Berth reads: "" when unset; else it must be a readable file."""
    path = os.environ.get(name, "").strip()
    if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise ImproperlyConfigured(f"{name}={path!r} is not a readable file: give a file's path.")
    return path


def env_http_url(name: str) -> str:
    """An optional http(s)://host[:port] address without a trailing slash: "" when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not an address: give one like https://berth.example.com."
        )
    return raw.rstrip("/")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r} is not one of: {', '.join(choices)}.")
    return word


def env_secret(name: str) -> str:
    """A secret from NAME, or from the file NAME_FILE names (for secret stores that mount
    files): "" when neither is set. Never echoed in an error."""
    file_name = f"{name}_FILE"
    path = os.environ.get(file_name, "").strip()
    if path and name in os.environ:
        raise ImproperlyConfigured(f"Set {name} or {file_name}, not both.")
    if not path:
        return os.environ.get(name, "")
    try:
        with open(path, encoding="utf-8") as secret_file:
            return secret_file.read().strip()
    except OSError:
        raise ImproperlyConfigured(
            f"{file_name}={path!r} is not a readable file: give the secret file's path."
        ) from None


def env_token(name: str, shortest: int) -> str:
    """A secret others must present (env_secret's two ways), "" when unset; a short one is
    refused, since anyone who guesses it reads what it guards. Never echoed in an error."""
    token = env_secret(name)
    if token and len(token) < shortest:
        raise ImproperlyConfigured(
            f"{name} is {len(token)} characters long, too short to be hard to guess: give at "
            f"least {shortest}, e.g. from `openssl rand -hex 32`."
        )
    return token


def env_email_address(name: str, *, needed_by: str) -> str:
    """An e-mail address, required when the setting needed_by names is set ("" otherwise)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        if needed_by and os.environ.get(needed_by, "").strip():
            raise ImproperlyConfigured(
                f"{name} is not set, and {needed_by} needs it: give the address notices "
                "come from, e.g. berth@example.com."
            )
        return ""
    local, at, domain = raw.rpartition("@")
    if not (local and at and "." in domain) or any(c.isspace() for c in raw):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not an e-mail address: give one like berth@example.com."
        )
    return raw


def check_single_sign_on(issuer: str, client_id: str, secret: str, password_login: str) -> None:
    """That single sign-on's settings make sense together (console/sso.py uses them)."""
    if issuer and not (client_id and secret):
        missing = "BERTH_OIDC_CLIENT_ID" if not client_id else "BERTH_OIDC_CLIENT_SECRET"
        raise ImproperlyConfigured(
            f"BERTH_OIDC_ISSUER is set, and single sign-on needs {missing} too: the client "
            "registered for Berth at the provider."
        )
    if password_login == "staff" and not issuer:
        raise ImproperlyConfigured(
            "BERTH_PASSWORD_LOGIN=staff needs single sign-on (BERTH_OIDC_ISSUER): without it only "
            "platform admins could log in."
        )
