"""Teams, memberships (a role per team) and personal API keys."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from console import crypto

SLUG_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
slug_validator = RegexValidator(
    SLUG_PATTERN, "Use lowercase letters, digits and dashes; start and end with a letter or digit."
)
API_KEY_PREFIX = "berth_"


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"


ROLE_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


class Team(models.Model):
    """A group of people who own deployments together."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Downloads gated models for the team; encrypted, write-only (never rendered back).
    hf_token_encrypted = models.TextField(blank=True, editable=False)
    # When the token was last set or cleared: all a page ever says about it.
    hf_token_changed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__regex=SLUG_PATTERN), name="team_name_is_slug"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def set_hf_token(self, token: str) -> None:
        self.hf_token_encrypted = crypto.encrypt(token) if token else ""
        self.hf_token_changed_at = timezone.now()

    def hf_token(self) -> str:
        return crypto.decrypt(self.hf_token_encrypted) if self.hf_token_encrypted else ""

    @property
    def has_hf_token(self) -> bool:
        return bool(self.hf_token_encrypted)


class UserSettings(models.Model):
    """What a user chose for themselves on their account page."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="berth_settings"
    )
    # An IANA zone name (console/time_zones.py checks it); empty: the browser's zone.
    time_zone = models.CharField(max_length=64, blank=True)

    class Meta:
        verbose_name_plural = "user settings"

    def __str__(self) -> str:
        return f"{self.user}'s settings"


class Membership(models.Model):
    """A user's role in one team."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team"),
            models.CheckConstraint(
                condition=models.Q(role__in=Role.values), name="membership_role_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} in {self.team}"


def hash_secret(secret: str) -> str:
    # SHA-256 is right for a random 256-bit secret: nothing to brute-force, and it stays fast
    # enough to check on every gateway request (a password hash would cost ~100 ms each).
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyScope(models.TextChoices):
    """What a key may do (console/keys.py says what each allows)."""

    READ = "read", "read: GET requests, fit check and estimate"
    CHAT = "chat", "chat: the gateway only"
    OPERATE = "operate", "operate: everything its owner's roles allow"


class ApiKeyQuerySet(models.QuerySet["ApiKey"]):
    def active(self) -> ApiKeyQuerySet:
        """Neither revoked nor expired."""
        unexpired = models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())
        return self.filter(unexpired, revoked_at__isnull=True)


class ApiKey(models.Model):
    """A personal API key: acts with its owner's memberships; only its hash is kept."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Keys made before scopes existed may do what their owner may: operate.
    scope = models.CharField(max_length=8, choices=KeyScope.choices, default=KeyScope.OPERATE)
    expires_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(
        cls,
        user: object,
        name: str,
        scope: str = KeyScope.OPERATE,
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        """Create a key and return it with the full secret, which is never stored or shown again.
        Keys are issued through console/keys.py, which checks and audits them."""
        body = secrets.token_urlsafe(32)  # 256 bits
        full = f"{API_KEY_PREFIX}{body}"
        key = cls.objects.create(
            user=user,
            name=name,
            prefix=body[:12],
            secret_hash=hash_secret(full),
            scope=scope,
            expires_at=expires_at,
        )
        return key, full

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @classmethod
    def find(cls, presented: str) -> ApiKey | None:
        """The active key matching a presented secret, or None."""
        if not presented.startswith(API_KEY_PREFIX):
            return None
        prefix = presented[len(API_KEY_PREFIX) : len(API_KEY_PREFIX) + 12]
        wanted = hash_secret(presented)
        for key in cls.objects.active().filter(prefix=prefix).select_related("user"):
            if secrets.compare_digest(key.secret_hash, wanted):
                return key
        return None


class AuditEntry(models.Model):
    """One action outside a deployment's own events: who did what to what, and when."""

    # Deployments keep their own Events; this is for keys, downloads, files, models added and
    # the admin's decisions (console/audit.py writes it; the audit page reads both).
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit_entries"
    )
    action = models.CharField(max_length=40, db_index=True)
    target = models.CharField(max_length=300)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name or 'Berth'} {self.action} {self.target}"


class GroupRule(models.Model):
    """At every single sign-on, the provider's group `group` gives `role` in `team`."""

    # A person gets the highest role their groups give in each team a rule names (console/sso.py).
    group = models.CharField(max_length=200, help_text="the group's name in the provider's claim")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="group_rules")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        ordering = ["group", "team__name"]
        constraints = [
            models.UniqueConstraint(fields=["group", "team"], name="one_rule_per_group_and_team"),
        ]

    def __str__(self) -> str:
        return f"{self.group} → {self.role} in {self.team}"


class SignOnIdentity(models.Model):
    """Who a user is at the single sign-on provider: its subject, which never changes."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sign_on"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.user} at {self.issuer}"
