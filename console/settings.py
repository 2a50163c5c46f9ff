"""Berth's settings: read from the environment only (they never start anything)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.env import (
    check_single_sign_on,
    database_from_url,
    env_bool,
    env_choice,
    env_email_address,
    env_executable,
    env_float,
    env_http_url,
    env_int,
    env_list,
    env_readable_file,
    env_secret,
    env_str,
    env_token,
    for_test_worker,
    redis_for_test_worker,
    redis_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("BERTH_DEBUG", False)
# Open live sockets one user may hold in one web process (a tab holds two or three).
SOCKETS_PER_USER = env_int("BERTH_SOCKETS_PER_USER", 100, low=1, high=10_000)
# A demo (make run): seed_demo may run, and its well-known passwords may stay. Without it, the
# web, gateway and worker processes refuse to start while a user still has one
# (console/demo_passwords.py).
DEMO = env_bool("BERTH_DEMO", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "insecure-development-key" if DEBUG else None)
# Encrypts stored credentials (kubeconfigs, tokens). Outside DEBUG it must be given: a key
# generated at start-up and then lost would make every stored credential unreadable.
CREDENTIALS_KEY = env_str("BERTH_CREDENTIALS_KEY", "" if DEBUG else None)
if not DEBUG and not CREDENTIALS_KEY:
    raise ImproperlyConfigured("BERTH_CREDENTIALS_KEY is empty: give a Fernet key (see README).")

ALLOWED_HOSTS = env_list("BERTH_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("BERTH_CSRF_TRUSTED_ORIGINS", [])

# No "daphne" app: it only lends `runserver` its ASGI server, and would load daphne and Twisted
# into every worker. The web process is daphne itself (Procfile).
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "ninja",  # serves its API docs' assets locally, never from a CDN
    "axes",  # counts failed logins (console/logins.py)
    "console",
    "clusters",
    "catalog",
    "deployments",
    "gateway",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "console.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "console.errors.JsonApiErrors",  # /api/ answers JSON, its 404 and 405 included
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.auth.ApiKeyMiddleware",
    "console.time_zones.TimeZoneMiddleware",  # times in the user's zone
    "console.auth.BerthLoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it answers a locked-out login
]

ROOT_URLCONF = "console.urls"
# A refused form post says why in words and what to do (console/errors.py).
CSRF_FAILURE_VIEW = "console.errors.csrf_failure"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context.navigation",
            ],
        },
    },
]

DATABASES = {"default": database_from_url("DATABASE_URL")}
# The tests' database; a distinct name lets two test runs share one PostgreSQL server.
DATABASES["default"]["TEST"] = {
    "NAME": env_str("BERTH_TEST_DATABASE", f"test_{DATABASES['default']['NAME']}")
}
REDIS_URL = redis_for_test_worker(redis_url("REDIS_URL"))

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": for_test_worker(env_str("BERTH_CHANNEL_PREFIX", "berth")),
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = for_test_worker(env_str("BERTH_CELERY_QUEUE", "berth"))
# Transfers (downloads from the hub, file syncs to machines, a copy's files brought to its
# machine: a Kubernetes fill Job can take an hour) have a queue and a worker line of their own,
# so that place, launch, stop and the reconcile pass never wait behind them.
CELERY_TRANSFER_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-transfers"
TRANSFER_TASKS = (
    "catalog.tasks.download_model",
    "deployments.tasks.sync_machine_files",
    "deployments.tasks.prepare_copy",
)
CELERY_TASK_ROUTES = {name: {"queue": CELERY_TRANSFER_QUEUE} for name in TRANSFER_TASKS}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
RECONCILE_EVERY_S = env_int("BERTH_RECONCILE_EVERY_S", 5, low=1, high=3600)
# Engines this install started that no copy owns are stopped: looked for this often, and only
# once they have run this long (a launch's pid or pod may not be written to its copy yet).
SWEEP_EVERY_S = env_int("BERTH_SWEEP_EVERY_S", 60, low=1, high=86400)
SWEEP_GRACE_S = env_int("BERTH_SWEEP_GRACE_S", 120, low=1, high=86400)
# Autoscaling (deployments/autoscaling.py): the autoscaler looks at the load this often; load
# must stay above the target for the up-window before copies are added (fast) and below it for
# the down-window before one leaves (slowly); a leaving copy's requests get the drain limit.
AUTOSCALE_EVERY_S = env_float("BERTH_AUTOSCALE_EVERY_S", 2.0, low=0.2, high=3600)
AUTOSCALE_UP_WINDOW_S = env_int("BERTH_AUTOSCALE_UP_WINDOW_S", 15, low=0, high=86400)
AUTOSCALE_DOWN_WINDOW_S = env_int("BERTH_AUTOSCALE_DOWN_WINDOW_S", 300, low=0, high=86400)
DRAIN_LIMIT_S = env_int("BERTH_DRAIN_LIMIT_S", 120, low=0, high=86400)
# How long the fit check may look for moves that make room (placement/repack.py), in ms.
REPACK_BUDGET_MS = env_int("BERTH_REPACK_BUDGET_MS", 200, low=10, high=60_000)
CELERY_BEAT_SCHEDULE = {
    "reconcile": {"task": "deployments.tasks.reconcile", "schedule": float(RECONCILE_EVERY_S)},
    "autoscale": {
        "task": "deployments.tasks.autoscale",
        "schedule": AUTOSCALE_EVERY_S,
        # A pass that waited past the next one is stale: the next reads the load afresh.
        "options": {"expires": AUTOSCALE_EVERY_S},
    },
    "prune-logs": {"task": "deployments.tasks.prune_logs", "schedule": 300.0},
    "sweep-strays": {"task": "deployments.tasks.sweep_strays", "schedule": float(SWEEP_EVERY_S)},
    "deliver-notifications": {
        "task": "deployments.tasks.deliver_due_notifications",
        "schedule": float(RECONCILE_EVERY_S),
    },
    # The gateway's usage records (gateway/usage.py): finished hours summed, old ones deleted.
    "roll-up-usage": {"task": "gateway.tasks.roll_up_usage", "schedule": 300.0},
    "prune-usage": {"task": "gateway.tasks.prune_usage", "schedule": 3600.0},
    "refresh-inventories": {
        "task": "clusters.tasks.refresh_all_inventories",
        "schedule": float(env_int("BERTH_REFRESH_EVERY_S", 30, low=1, high=86400)),
    },
}
WATCH_EVERY_S = env_float("BERTH_WATCH_EVERY_S", 1.0, low=0.05, high=60)
# Heartbeats of the background processes (console/heartbeats.py): written this often; a part
# whose last one is older than the staleness is down on /health and the status page. At least a
# second: the worker's timer (kombu's event loop) does not keep a shorter beat.
HEARTBEAT_EVERY_S = env_float("BERTH_HEARTBEAT_EVERY_S", 5.0, low=1, high=300)
HEARTBEAT_STALE_S = env_float("BERTH_HEARTBEAT_STALE_S", 30.0, low=2, high=3600)
if HEARTBEAT_STALE_S < 2 * HEARTBEAT_EVERY_S:
    raise ImproperlyConfigured(
        f"BERTH_HEARTBEAT_STALE_S={HEARTBEAT_STALE_S:g} is less than twice "
        f"BERTH_HEARTBEAT_EVERY_S={HEARTBEAT_EVERY_S:g}: a part would read as down between two "
        "of its heartbeats. Raise the staleness or shorten the interval."
    )
# Beat's scheduler also writes beat's heartbeat from its own tick (console/celery.py).
CELERY_BEAT_SCHEDULER = "console.celery:HeartbeatScheduler"
# How often the watcher scrapes the engines' /metrics for the deployment pages.
METRICS_EVERY_S = env_float("BERTH_METRICS_EVERY_S", 10.0, low=0.1, high=3600)
# Log retention: the newest lines kept per copy; older ones are pruned every 5 minutes.
LOG_LINES_PER_COPY = env_int("BERTH_LOG_LINES_PER_COPY", 20_000, low=100, high=10_000_000)
# Engine logs are followed more often than health is checked, so lines reach pages fast.
LOG_FOLLOW_EVERY_S = env_float("BERTH_LOG_FOLLOW_EVERY_S", 0.1, low=0.01, high=60)
# Where models downloaded from Hugging Face are kept on this server.
MODELS_DIR = Path(env_str("BERTH_MODELS_DIR", for_test_worker(str(BASE_DIR / "var" / "models"))))
# Where local engines (standalone, simulator) keep their logs and process records.
STATE_DIR = Path(env_str("BERTH_STATE_DIR", for_test_worker(str(BASE_DIR / "var" / "state"))))
# The real engines `make engines` installs, one folder per engine version (outside the checkout,
# so every clone and CI on this machine share one build); a *_BIN path overrides its engine.
ENGINE_CACHE_DIR = Path(
    env_str("BERTH_ENGINE_CACHE", str(Path.home() / ".cache" / "berth" / "engines"))
)
VLLM_BIN = env_executable("BERTH_VLLM_BIN")
LLAMA_SERVER_BIN = env_executable("BERTH_LLAMA_SERVER_BIN")
# On a CPU-only machine, the memory kept for the system and the console: engines get the rest.
CPU_RESERVE_GIB = env_float("BERTH_CPU_RESERVE_GIB", 4.0, low=0, high=4096)
SIMULATOR_COPY_BYTES_PER_S = env_int("BERTH_SIMULATOR_COPY_BYTES_PER_S", 20 * 2**30, low=1)
# Retries of failures that can pass: exponential backoff from the base, capped.
RETRY_BASE_S = env_float("BERTH_RETRY_BASE_S", 5.0, low=0.1, high=3600)
RETRY_MAX_S = env_float("BERTH_RETRY_MAX_S", 300.0, low=0.1, high=86400)
# Notifications (deployments/notifications.py): webhooks are tried this many times, waiting
# base × 2^(n-1) seconds (at most an hour) after the n-th failure, each try within the timeout.
WEBHOOK_ATTEMPTS = env_int("BERTH_WEBHOOK_ATTEMPTS", 5, low=1, high=20)
WEBHOOK_RETRY_BASE_S = env_float("BERTH_WEBHOOK_RETRY_BASE_S", 30.0, low=0.1, high=3600)
WEBHOOK_TIMEOUT_S = env_float("BERTH_WEBHOOK_TIMEOUT_S", 10.0, low=1, high=60)
# Certificate authorities webhooks' servers are checked against (PEM); empty: the system's.
WEBHOOK_CA_FILE = env_readable_file("BERTH_WEBHOOK_CA_FILE")
# E-mail notifications go through this SMTP server, and only when BERTH_SMTP_HOST is set:
# STARTTLS on 587 by default ("tls": TLS from the first byte, as on 465; "none": plain, for a
# relay on the same host). The password comes from BERTH_SMTP_PASSWORD or the file
# BERTH_SMTP_PASSWORD_FILE names, and is never shown or logged.
SMTP_HOST = env_str("BERTH_SMTP_HOST", "").strip()
SMTP_PORT = env_int("BERTH_SMTP_PORT", 587, low=1, high=65535)
SMTP_SECURITY = env_choice("BERTH_SMTP_SECURITY", "starttls", ("starttls", "tls", "none"))
SMTP_USER = env_str("BERTH_SMTP_USER", "").strip()
SMTP_PASSWORD = env_secret("BERTH_SMTP_PASSWORD")
SMTP_FROM = env_email_address("BERTH_SMTP_FROM", needed_by="BERTH_SMTP_HOST")
SMTP_TIMEOUT_S = env_float("BERTH_SMTP_TIMEOUT_S", 10.0, low=1, high=60)
# Certificate authorities the mail server is checked against (PEM); empty: the system's.
SMTP_CA_FILE = env_readable_file("BERTH_SMTP_CA_FILE")
# A bearer token with which Prometheus scrapes the console's /metrics, the whole fleet's figures
# (empty: only API keys and platform admins' sessions read /metrics). From BERTH_METRICS_TOKEN or
# the file BERTH_METRICS_TOKEN_FILE names; never shown or logged.
METRICS_TOKEN = env_token("BERTH_METRICS_TOKEN", shortest=32)
# The console's address as people reach it, for links in notifications (empty: paths only).
CONSOLE_URL = env_http_url("BERTH_CONSOLE_URL")
# A copy must serve within base + per-GiB × model size (× 3 on unified-memory machines).
STARTUP_TIMEOUT_BASE_S = env_float("BERTH_STARTUP_TIMEOUT_BASE_S", 300.0, low=1, high=86400)
STARTUP_TIMEOUT_PER_GIB_S = env_float("BERTH_STARTUP_TIMEOUT_PER_GIB_S", 10.0, low=0, high=3600)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed logins (console/logins.py): a user and an address that failed this often are refused
# for this long; the user from other addresses is only slowed down.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Single sign-on with an OpenID Connect provider (console/sso.py): its issuer's URL, and the
# client registered for Berth there (the secret from BERTH_OIDC_CLIENT_SECRET or the file
# BERTH_OIDC_CLIENT_SECRET_FILE names). Unset: passwords only.
OIDC_ISSUER = env_http_url("BERTH_OIDC_ISSUER")
OIDC_CLIENT_ID = env_str("BERTH_OIDC_CLIENT_ID", "").strip()
OIDC_CLIENT_SECRET = env_secret("BERTH_OIDC_CLIENT_SECRET")
# The claim that lists a person's groups, which the admin's group rules map to teams and roles.
OIDC_GROUPS_CLAIM = env_str("BERTH_OIDC_GROUPS_CLAIM", "groups").strip() or "groups"
# staff: only platform admins log in with a password; everyone else through single sign-on.
PASSWORD_LOGIN = env_choice("BERTH_PASSWORD_LOGIN", "everyone", ("everyone", "staff"))
check_single_sign_on(OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, PASSWORD_LOGIN)
if OIDC_ISSUER:
    AUTHENTICATION_BACKENDS.append("console.sso.SingleSignOn")
# mozilla-django-oidc's own settings (the provider's endpoints come from its discovery document).
OIDC_RP_CLIENT_ID = OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = OIDC_CLIENT_SECRET
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = "openid email profile"
OIDC_USE_PKCE = True
LOGIN_REDIRECT_URL_FAILURE = "/login/"
AXES_FAILURE_LIMIT = env_int("BERTH_LOGIN_FAILURE_LIMIT", 5, low=1, high=100)
AXES_COOLOFF_TIME = timedelta(
    minutes=env_int("BERTH_LOGIN_LOCKOUT_MINUTES", 15, low=1, high=24 * 60)
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "console.logins.locked_out"
AXES_CLIENT_IP_CALLABLE = "console.logins.client_address"
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_SECURE = env_bool("BERTH_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_REFERRER_POLICY = "same-origin"
# Behind HTTPS (secure cookies), browsers are told to come back over HTTPS only, for a year.
SECURE_HSTS_SECONDS = 365 * 24 * 3600 if SESSION_COOKIE_SECURE else 0

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env_str("BERTH_STATIC_ROOT", "") or None  # only for collectstatic deployments
WHITENOISE_USE_FINDERS = True  # serve from the source folders; no collectstatic step needed
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The gateway (its own process): where it listens and how it is reached from outside.
GATEWAY_PORT = env_int("BERTH_GATEWAY_PORT", 8001, low=1, high=65535)
# Empty: the console's own host name on GATEWAY_PORT, as the browser reached the console.
GATEWAY_URL = env_str("BERTH_GATEWAY_URL", "")
GATEWAY_REFRESH_S = env_float("BERTH_GATEWAY_REFRESH_S", 2.0, low=0.1, high=3600)
GATEWAY_FLUSH_S = env_float("BERTH_GATEWAY_FLUSH_S", 60.0, low=0.1, high=3600)
# Gateway default for "a reply must start within", in seconds (deployments may set 10..1800).
GATEWAY_REPLY_WAIT_S = env_int("BERTH_REPLY_WAIT_S", 180, low=10, high=1800)
# The gateway's limits (gateway/limits.py): the largest body it reads, and per API key the
# requests at once and a minute; above them it answers 413 and 429.
GATEWAY_MAX_BODY_MIB = env_int("BERTH_GATEWAY_MAX_BODY_MIB", 8, low=1, high=1024)
GATEWAY_KEY_CONCURRENT = env_int("BERTH_GATEWAY_KEY_CONCURRENT", 256, low=1, high=100_000)
GATEWAY_KEY_PER_MINUTE = env_int("BERTH_GATEWAY_KEY_PER_MINUTE", 6000, low=1, high=10_000_000)
# Routing (gateway/routing.py): a copy holding a request's prefix or session is passed over
# when it has this many requests in flight more than the least loaded copy; the prefix index of
# each gateway process is bounded in entries and in memory (the least recently used go first).
GATEWAY_ROUTING_MARGIN = env_int("BERTH_ROUTING_LOAD_MARGIN", 4, low=0, high=10_000)
GATEWAY_PREFIX_INDEX_ENTRIES = env_int(
    "BERTH_PREFIX_INDEX_ENTRIES", 200_000, low=100, high=100_000_000
)
GATEWAY_PREFIX_INDEX_MIB = env_int("BERTH_PREFIX_INDEX_MIB", 64, low=1, high=65_536)
# How many times one streamed answer may go on at another copy when its copy breaks off.
GATEWAY_STREAM_RESUMES = env_int("BERTH_STREAM_RESUMES", 1, low=0, high=10)
# Requests one gateway process holds for an idle deployment while it wakes (more: 503).
GATEWAY_WAKE_HOLD = env_int("BERTH_GATEWAY_WAKE_HOLD", 100, low=1, high=100_000)
# Usage records (gateway/usage.py) are kept this many days, then deleted with their hours.
USAGE_DAYS = env_int("BERTH_USAGE_DAYS", 400, low=1, high=100_000)
# Whether the gateway writes a usage record per request and counts it in its metrics.
USAGE_METERING = env_bool("BERTH_USAGE_METERING", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("BERTH_LOG_LEVEL", "INFO")},
    # axes says each login's reset at INFO; lockouts (WARNING) are what an operator needs.
    "loggers": {"axes": {"level": "WARNING"}},
}
