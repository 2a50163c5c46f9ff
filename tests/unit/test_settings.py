"""A malformed setting stops start-up with a message that names the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

GOOD = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/berth",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DJANGO_SECRET_KEY": "x" * 50,
    "BERTH_CREDENTIALS_KEY": "y" * 40,
    "DJANGO_SETTINGS_MODULE": "console.settings",
}


def start_with(**overrides: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in GOOD and not key.startswith("BERTH_")
    }
    env.update(GOOD)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    code = "import django; django.setup(); print('started')"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_good_settings_start():
    result = start_with()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "started"


@pytest.mark.parametrize(
    "variable,value,expected",
    [
        ("DATABASE_URL", "mysql://root@localhost/berth", "DATABASE_URL must use postgresql://"),
        (
            "DATABASE_URL",
            "postgresql://postgres@127.0.0.1:notaport/berth",
            "DATABASE_URL is malformed",
        ),
        (
            "DATABASE_URL",
            "postgresql://127.0.0.1:5432/",
            "DATABASE_URL is missing a host or a database name",
        ),
        ("DATABASE_URL", None, "DATABASE_URL is not set"),
        ("REDIS_URL", "http://127.0.0.1:6379", "REDIS_URL is malformed"),
        ("REDIS_URL", "redis://127.0.0.1:99999/0", "REDIS_URL is malformed"),
        ("BERTH_DEBUG", "maybe", "BERTH_DEBUG='maybe' is not a boolean"),
        ("BERTH_SECURE_COOKIES", "sometimes", "BERTH_SECURE_COOKIES='sometimes' is not a boolean"),
        ("BERTH_REPLY_WAIT_S", "5", "BERTH_REPLY_WAIT_S=5 is outside 10..1800"),
        ("BERTH_REPLY_WAIT_S", "soon", "BERTH_REPLY_WAIT_S='soon' is not a whole number"),
        ("BERTH_CREDENTIALS_KEY", None, "BERTH_CREDENTIALS_KEY is not set"),
        ("BERTH_SOCKETS_PER_USER", "0", "BERTH_SOCKETS_PER_USER=0 is outside 1..10000"),
        ("BERTH_GATEWAY_MAX_BODY_MIB", "0", "BERTH_GATEWAY_MAX_BODY_MIB=0 is outside 1..1024"),
        (
            "BERTH_GATEWAY_KEY_CONCURRENT",
            "many",
            "BERTH_GATEWAY_KEY_CONCURRENT='many' is not a whole number",
        ),
        (
            "BERTH_GATEWAY_KEY_PER_MINUTE",
            "0",
            "BERTH_GATEWAY_KEY_PER_MINUTE=0 is outside 1..10000000",
        ),
        ("BERTH_LOGIN_FAILURE_LIMIT", "0", "BERTH_LOGIN_FAILURE_LIMIT=0 is outside 1..100"),
        (
            "BERTH_LOGIN_LOCKOUT_MINUTES",
            "forever",
            "BERTH_LOGIN_LOCKOUT_MINUTES='forever' is not a whole number",
        ),
        ("BERTH_SWEEP_GRACE_S", "0", "BERTH_SWEEP_GRACE_S=0 is outside 1..86400"),
        ("BERTH_AUTOSCALE_EVERY_S", "0.1", "BERTH_AUTOSCALE_EVERY_S=0.1 is outside 0.2..3600"),
        ("BERTH_AUTOSCALE_EVERY_S", "often", "BERTH_AUTOSCALE_EVERY_S='often' is not a number"),
        (
            "BERTH_AUTOSCALE_UP_WINDOW_S",
            "-1",
            "BERTH_AUTOSCALE_UP_WINDOW_S=-1 is outside 0..86400",
        ),
        (
            "BERTH_AUTOSCALE_DOWN_WINDOW_S",
            "slowly",
            "BERTH_AUTOSCALE_DOWN_WINDOW_S='slowly' is not a whole number",
        ),
        ("BERTH_DRAIN_LIMIT_S", "1e9", "BERTH_DRAIN_LIMIT_S='1e9' is not a whole number"),
        ("BERTH_GATEWAY_WAKE_HOLD", "0", "BERTH_GATEWAY_WAKE_HOLD=0 is outside 1..100000"),
        ("BERTH_ROUTING_LOAD_MARGIN", "-1", "BERTH_ROUTING_LOAD_MARGIN=-1 is outside 0..10000"),
        ("BERTH_ROUTING_LOAD_MARGIN", "a few", "BERTH_ROUTING_LOAD_MARGIN='a few' is not a whole"),
        (
            "BERTH_PREFIX_INDEX_ENTRIES",
            "10",
            "BERTH_PREFIX_INDEX_ENTRIES=10 is outside 100..100000000",
        ),
        ("BERTH_PREFIX_INDEX_MIB", "0", "BERTH_PREFIX_INDEX_MIB=0 is outside 1..65536"),
        ("BERTH_STREAM_RESUMES", "11", "BERTH_STREAM_RESUMES=11 is outside 0..10"),
        ("BERTH_USAGE_DAYS", "0", "BERTH_USAGE_DAYS=0 is outside 1..100000"),
        ("BERTH_USAGE_DAYS", "a year", "BERTH_USAGE_DAYS='a year' is not a whole number"),
        ("BERTH_USAGE_METERING", "sometimes", "BERTH_USAGE_METERING='sometimes' is not a boolean"),
        ("BERTH_REPACK_BUDGET_MS", "5", "BERTH_REPACK_BUDGET_MS=5 is outside 10..60000"),
        ("BERTH_SWEEP_EVERY_S", "often", "BERTH_SWEEP_EVERY_S='often' is not a whole number"),
        ("BERTH_CPU_RESERVE_GIB", "-1", "BERTH_CPU_RESERVE_GIB=-1 is outside 0..4096"),
        ("BERTH_CPU_RESERVE_GIB", "some", "BERTH_CPU_RESERVE_GIB='some' is not a number"),
        ("BERTH_HEARTBEAT_EVERY_S", "0.5", "BERTH_HEARTBEAT_EVERY_S=0.5 is outside 1..300"),
        ("BERTH_HEARTBEAT_EVERY_S", "often", "BERTH_HEARTBEAT_EVERY_S='often' is not a number"),
        ("BERTH_HEARTBEAT_STALE_S", "5000", "BERTH_HEARTBEAT_STALE_S=5000 is outside 2..3600"),
        ("BERTH_HEARTBEAT_STALE_S", "1", "BERTH_HEARTBEAT_STALE_S=1 is outside 2..3600"),
        (
            "BERTH_VLLM_BIN",
            "/no/such/vllm",
            "BERTH_VLLM_BIN='/no/such/vllm' is not an executable file",
        ),
        (
            "BERTH_LLAMA_SERVER_BIN",
            "/tmp",
            "BERTH_LLAMA_SERVER_BIN='/tmp' is not an executable file",
        ),
        ("BERTH_SMTP_PORT", "0", "BERTH_SMTP_PORT=0 is outside 1..65535"),
        ("BERTH_SMTP_PORT", "smtp", "BERTH_SMTP_PORT='smtp' is not a whole number"),
        ("BERTH_SMTP_SECURITY", "ssl", "BERTH_SMTP_SECURITY='ssl' is not one of: starttls, tls,"),
        ("BERTH_SMTP_FROM", "berth", "BERTH_SMTP_FROM='berth' is not an e-mail address"),
        ("BERTH_SMTP_FROM", "a b@example.com", "BERTH_SMTP_FROM='a b@example.com' is not an e-"),
        ("BERTH_SMTP_HOST", "mail.example.com", "BERTH_SMTP_FROM is not set, and BERTH_SMTP_HOST"),
        (
            "BERTH_SMTP_PASSWORD_FILE",
            "/no/such/password",
            "BERTH_SMTP_PASSWORD_FILE='/no/such/password' is not a readable file",
        ),
        ("BERTH_SMTP_TIMEOUT_S", "0", "BERTH_SMTP_TIMEOUT_S=0 is outside 1..60"),
        (
            "BERTH_METRICS_TOKEN",
            "short-token",
            "BERTH_METRICS_TOKEN is 11 characters long, too short to be hard to guess: give at "
            "least 32, e.g. from `openssl rand -hex 32`.",
        ),
        (
            "BERTH_OIDC_ISSUER",
            "login.example.com",
            "BERTH_OIDC_ISSUER='login.example.com' is not an address",
        ),
        (
            "BERTH_OIDC_ISSUER",
            "https://login.example.com",
            "BERTH_OIDC_ISSUER is set, and single sign-on needs BERTH_OIDC_CLIENT_ID too: the "
            "client registered for Berth at the provider.",
        ),
        (
            "BERTH_PASSWORD_LOGIN",
            "staff",
            "BERTH_PASSWORD_LOGIN=staff needs single sign-on (BERTH_OIDC_ISSUER): without it only "
            "platform admins could log in.",
        ),
        (
            "BERTH_PASSWORD_LOGIN",
            "nobody",
            "BERTH_PASSWORD_LOGIN='nobody' is not one of: everyone, staff.",
        ),
        (
            "BERTH_METRICS_TOKEN_FILE",
            "/no/such/token",
            "BERTH_METRICS_TOKEN_FILE='/no/such/token' is not a readable file",
        ),
        ("BERTH_SMTP_CA_FILE", "/no/such/ca.pem", "BERTH_SMTP_CA_FILE='/no/such/ca.pem' is not a"),
    ],
)
def test_a_malformed_value_fails_start_up_naming_the_variable(variable, value, expected):
    result = start_with(**{variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert expected in result.stderr


def test_debug_mode_runs_without_secret_keys():
    result = start_with(BERTH_DEBUG="true", DJANGO_SECRET_KEY=None, BERTH_CREDENTIALS_KEY=None)
    assert result.returncode == 0, result.stderr


def test_a_heartbeat_staleness_under_two_intervals_fails_start_up_saying_why():
    result = start_with(BERTH_HEARTBEAT_EVERY_S="10", BERTH_HEARTBEAT_STALE_S="15")
    assert result.returncode != 0
    assert (
        "BERTH_HEARTBEAT_STALE_S=15 is less than twice BERTH_HEARTBEAT_EVERY_S=10: a part would "
        "read as down between two of its heartbeats."
    ) in result.stderr


def test_an_smtp_password_given_twice_fails_start_up_without_showing_it(tmp_path):
    secret_file = tmp_path / "smtp-password"
    secret_file.write_text("file-password")
    result = start_with(
        BERTH_SMTP_PASSWORD="env-password", BERTH_SMTP_PASSWORD_FILE=str(secret_file)
    )
    assert result.returncode != 0
    assert "Set BERTH_SMTP_PASSWORD or BERTH_SMTP_PASSWORD_FILE, not both." in result.stderr
    assert "env-password" not in result.stderr and "file-password" not in result.stderr


def test_good_smtp_settings_start():
    result = start_with(
        BERTH_SMTP_HOST="mail.example.com",
        BERTH_SMTP_FROM="berth@example.com",
        BERTH_SMTP_SECURITY="TLS",
        BERTH_SMTP_PORT="465",
    )
    assert result.returncode == 0, result.stderr


def settings_seen(**overrides: str) -> list[str]:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.REDIS_URL, s.CELERY_TASK_DEFAULT_QUEUE, s.CELERY_TRANSFER_QUEUE, "
        "s.CHANNEL_LAYERS['default']['CONFIG']['prefix'], s.STATE_DIR.name, s.MODELS_DIR.name)"
    )
    env = {k: v for k, v in os.environ.items() if k not in GOOD and not k.startswith("BERTH_")}
    env = {k: v for k, v in env.items() if k != "PYTEST_XDIST_WORKER"} | GOOD | overrides
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_each_parallel_test_worker_has_its_own_redis_queues_and_folders():
    alone = settings_seen()
    assert alone == ["redis://127.0.0.1:6379/0", "berth", "berth-transfers", "berth", "state",
                     "models"]  # fmt: skip
    second = settings_seen(PYTEST_XDIST_WORKER="gw1")
    assert second == ["redis://127.0.0.1:6379/2", "berth-gw1", "berth-gw1-transfers",
                      "berth-gw1", "state-gw1", "models-gw1"]  # fmt: skip


def test_a_short_scrape_token_is_not_echoed():
    result = start_with(BERTH_METRICS_TOKEN="hunter2-secret")
    assert result.returncode != 0
    assert "hunter2-secret" not in result.stderr


def test_a_scrape_token_from_a_file_starts(tmp_path):
    token_file = tmp_path / "metrics-token"
    token_file.write_text("t" * 32 + "\n")
    result = start_with(BERTH_METRICS_TOKEN_FILE=str(token_file))
    assert result.returncode == 0, result.stderr


def test_an_issuer_with_a_client_id_but_no_secret_names_the_secret():
    result = start_with(BERTH_OIDC_ISSUER="https://login.example.com", BERTH_OIDC_CLIENT_ID="berth")
    assert result.returncode != 0
    assert "single sign-on needs BERTH_OIDC_CLIENT_SECRET too" in result.stderr


def test_single_sign_on_settings_that_agree_start():
    result = start_with(
        BERTH_OIDC_ISSUER="https://login.example.com",
        BERTH_OIDC_CLIENT_ID="berth",
        BERTH_OIDC_CLIENT_SECRET="s3cret",
        BERTH_PASSWORD_LOGIN="staff",
    )
    assert result.returncode == 0, result.stderr
