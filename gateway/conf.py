"""The gateway's tunables: from Django settings when they name them, else from the environment."""

from __future__ import annotations

from django.conf import settings

from console.env import env_float, env_int, env_str


def seconds(setting: str, env: str, default: float, low: float, high: float) -> float:
    value = getattr(settings, setting, None)
    return float(value) if value is not None else env_float(env, default, low=low, high=high)


def refresh_s() -> float:
    """How often the table of ready copies is re-read when nothing announced a change."""
    return seconds("GATEWAY_REFRESH_S", "BERTH_GATEWAY_REFRESH_S", 2.0, 0.05, 300)


def flush_s() -> float:
    """How often the measured figures go to the database."""
    return seconds("GATEWAY_FLUSH_S", "BERTH_GATEWAY_FLUSH_S", 60.0, 0.1, 3600)


def usage_flush_s() -> float:
    """How often the usage records go to the database: what a gateway that dies may lose."""
    return seconds("GATEWAY_USAGE_FLUSH_S", "BERTH_GATEWAY_USAGE_FLUSH_S", 1.0, 0.1, 3600)


# The limits are read (and checked) with the other settings at start-up (console/settings.py).


def max_body_bytes() -> int:
    """The largest request body the gateway reads (bigger ones are answered 413)."""
    return int(settings.GATEWAY_MAX_BODY_MIB) << 20


def key_concurrent() -> int:
    """Requests one API key may have running at once (more are answered 429)."""
    return int(settings.GATEWAY_KEY_CONCURRENT)


def key_per_minute() -> int:
    """Requests one API key may start within a minute (more are answered 429)."""
    return int(settings.GATEWAY_KEY_PER_MINUTE)


def usage_metering() -> bool:
    """Whether each request is metered: its usage record and this process's metrics
    (BERTH_USAGE_METERING, default true; the benchmark's "off")."""
    return bool(settings.USAGE_METERING)


def wake_hold() -> int:
    """Requests this process holds for one idle deployment while it wakes (more: 503)."""
    return int(settings.GATEWAY_WAKE_HOLD)


def gateway_port() -> int:
    return int(getattr(settings, "GATEWAY_PORT", None) or env_int("BERTH_GATEWAY_PORT", 8001))


def gateway_url(scheme: str, host: str) -> str:
    """The address clients use: BERTH_GATEWAY_URL when a proxy puts the gateway elsewhere,
    else the gateway's own port on the host the console was reached at."""
    configured = getattr(settings, "GATEWAY_URL", None) or env_str("BERTH_GATEWAY_URL", "")
    if configured:
        return configured.rstrip("/")
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return f"{scheme}://{hostname}:{gateway_port()}/v1"
