"""Where the client finds the console and its key: the arguments given, else BERTH_URL and
BERTH_API_KEY, else what `berth login` stored in the user's config folder (a file only its
owner may read, mode 0600)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from berth_sdk.errors import ConfigurationError

URL_VARIABLE = "BERTH_URL"
KEY_VARIABLE = "BERTH_API_KEY"
GATEWAY_VARIABLE = "BERTH_GATEWAY_URL"
FILE_NAME = "config.json"


def config_dir() -> Path:
    """The user's config folder for Berth, as each system places them."""
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / "berth"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "berth"
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "berth"


def config_file() -> Path:
    return config_dir() / FILE_NAME


@dataclass(frozen=True)
class Login:
    """What `berth login` stored."""

    url: str
    api_key: str


def stored_login(path: Path | None = None) -> Login | None:
    """The stored login, or None when there is none; a damaged file is an error naming it."""
    path = path or config_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ConfigurationError(
            f"{path} cannot be read ({error}); run `berth login` again to rewrite it"
        ) from None
    if not isinstance(data, dict) or not {"url", "api_key"} <= data.keys():
        raise ConfigurationError(f"{path} lacks url or api_key; run `berth login` again")
    return Login(url=str(data["url"]), api_key=str(data["api_key"]))


def store_login(login: Login, path: Path | None = None) -> Path:
    """Write the login readable by its owner only (the folder too), replacing any before."""
    path = path or config_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        os.chmod(path, 0o600)  # a file written before with wider rights is narrowed too
        json.dump({"url": login.url, "api_key": login.api_key}, file, indent=2)
        file.write("\n")
    return path


def forget_login(path: Path | None = None) -> bool:
    """Remove the stored login; whether there was one."""
    path = path or config_file()
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def normalized_url(url: str) -> str:
    """The console's address: http(s)://host[:port], without the API's own path."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"the console's URL {url!r} must start with http:// or https://, "
            "e.g. https://berth.example.com"
        )
    for suffix in ("/api/v1", "/api"):
        url = url.removesuffix(suffix)
    return url


def resolve(url: str | None, api_key: str | None) -> Login:
    """The URL and key to use: each as given, else from the environment, else the login."""
    url = url or os.environ.get(URL_VARIABLE) or None
    api_key = api_key or os.environ.get(KEY_VARIABLE) or None
    stored = stored_login() if url is None or api_key is None else None
    if stored is not None:
        # The stored key belongs to the stored console: never sent to another one.
        if api_key is None and (url is None or normalized_url(url) == stored.url):
            api_key = stored.api_key
        url = url or stored.url
    if url is None:
        raise ConfigurationError(
            f"no console URL: pass base_url=, set {URL_VARIABLE}, or run `berth login`"
        )
    if api_key is None:
        raise ConfigurationError(
            f"no API key: pass api_key=, set {KEY_VARIABLE}, or run `berth login` "
            "(create a key under API keys in the console)"
        )
    return Login(url=normalized_url(url), api_key=api_key)
