"""Single sign-on with an OpenID Connect provider (mozilla-django-oidc's code flow).

The provider is named by its issuer (BERTH_OIDC_ISSUER); its endpoints come from its discovery
document, read when first needed and kept. A person is known by the provider's subject, not by
a username: the first login creates the user (a username taken by a local account gets a
suffix, so no local account is ever taken over). At every login the user's groups (the claim
BERTH_OIDC_GROUPS_CLAIM) are mapped to teams and roles by the admin's group rules: in each team
some rule names, the user has the highest role a matching rule gives, or no membership; teams no
rule names are left as they are. A membership change is announced as any is (console/signals.py),
so the user's open sockets check again what it may see.

mozilla-django-oidc checks the ID token's signature and nonce; its issuer, audience and expiry
are checked here, each refusal said in words on the login page.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from console.models import ROLE_RANK, GroupRule, Membership, SignOnIdentity

log = logging.getLogger(__name__)

# How far the provider's clock may run ahead of or behind this server's.
CLOCK_LEEWAY_S = 60
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


class SignOnRefused(SuspiciousOperation):
    """A login the provider's answer does not allow, with words for the person."""


def configured() -> bool:
    return bool(settings.OIDC_ISSUER)


@functools.cache
def discovery(issuer: str) -> dict[str, Any]:
    """The provider's discovery document (a failed read is not kept: the next login tries again)."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        answer = requests.get(url, timeout=10)
        answer.raise_for_status()
        document: dict[str, Any] = answer.json()
    except (requests.RequestException, ValueError) as error:
        discovery.cache_clear()
        raise SignOnRefused(
            f"Single sign-on is unavailable: the provider's discovery document at {url} could "
            f"not be read ({type(error).__name__}). Try again shortly; if it persists, check "
            "BERTH_OIDC_ISSUER."
        ) from None
    return document


def setting(name: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings: the provider's endpoints from its discovery document,
    the rest from Django's settings."""
    if name in DISCOVERED:
        return discovery(settings.OIDC_ISSUER)[DISCOVERED[name]]
    return import_from_settings(name, *default)


def check_id_token(claims: dict[str, Any], now: float) -> None:
    """The checks mozilla-django-oidc leaves to us: who issued the token, for whom, until when."""
    issuer, client_id = settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID
    if claims.get("iss") != issuer:
        raise SignOnRefused(
            f"Single sign-on refused: the ID token was issued by {claims.get('iss')!r}, not by "
            f"{issuer!r} (BERTH_OIDC_ISSUER)."
        )
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if client_id not in audiences:
        raise SignOnRefused(
            f"Single sign-on refused: the ID token is meant for {', '.join(map(str, audiences))}, "
            f"not for this console's client id {client_id}. Check BERTH_OIDC_CLIENT_ID against "
            "the client registered at the provider."
        )
    expires = claims.get("exp")
    if not isinstance(expires, int | float):
        raise SignOnRefused("Single sign-on refused: the ID token does not say when it expires.")
    if expires + CLOCK_LEEWAY_S < now:
        when = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        raise SignOnRefused(
            f"Single sign-on refused: the ID token expired at {when}. Check that the provider's "
            "clock and this server's agree, then log in again."
        )


def roles_from_groups(groups: Iterable[str], rules: Iterable[GroupRule]) -> dict[int, str]:
    """Per team some rule names: the highest role a rule of the user's groups gives there, or
    "" (no membership)."""
    member_of = set(groups)
    wanted: dict[int, str] = {}
    for rule in rules:
        wanted.setdefault(rule.team_id, "")
        if rule.group in member_of and ROLE_RANK.get(rule.role, 0) > ROLE_RANK.get(
            wanted[rule.team_id], 0
        ):
            wanted[rule.team_id] = rule.role
    return wanted


def follow_groups(user: Any, groups: Iterable[str]) -> None:
    """Makes the user's memberships in the ruled teams what the rules give its groups now."""
    wanted = roles_from_groups(groups, GroupRule.objects.all())
    with transaction.atomic():
        held = {m.team_id: m for m in Membership.objects.filter(user=user, team_id__in=wanted)}
        for team_id, role in wanted.items():
            membership = held.get(team_id)
            if role and membership is None:
                Membership.objects.create(user=user, team_id=team_id, role=role)
            elif role and membership.role != role:
                membership.role = role
                membership.save(update_fields=["role"])
            elif not role and membership is not None:
                membership.delete()


def free_username(wanted: str) -> str:
    """The provider's name for the person, or with a number where an account has it already
    (alice → alice-2): a local account is never taken over."""
    users = get_user_model().objects
    base = (wanted or "user")[:140]
    name, n = base, 1
    while users.filter(username=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def groups_of(claims: dict[str, Any]) -> list[str]:
    found = claims.get(settings.OIDC_GROUPS_CLAIM) or []
    return [str(group) for group in found] if isinstance(found, list) else [str(found)]


class SingleSignOn(OIDCAuthenticationBackend):
    """The authentication backend of the code flow."""

    get_settings = staticmethod(setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Nothing is read here: Django makes a backend for every request of a signed-in user,
        # and the provider's endpoints are only needed at a login (the properties below).
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: setting("OIDC_OP_JWKS_ENDPOINT"))

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        if not configured() or request is None or "code" not in request.GET:
            return None  # a password login: not this backend's
        try:
            return super().authenticate(request, **kwargs)
        except SignOnRefused as refused:
            words = str(refused)
        except requests.RequestException as error:  # the token or user endpoint said no
            words = (
                "Single sign-on failed: the provider did not accept this console's request "
                f"({error}). Check BERTH_OIDC_CLIENT_ID and BERTH_OIDC_CLIENT_SECRET."
            )
        log.warning("single sign-on refused: %s", words)
        messages.error(request, words)
        return None

    def verify_token(self, token: Any, **kwargs: Any) -> Any:
        claims = super().verify_token(token, **kwargs)
        check_id_token(claims, time.time())
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        known = SignOnIdentity.objects.filter(
            issuer=settings.OIDC_ISSUER, subject=claims["sub"]
        ).values("user")
        return self.UserModel.objects.filter(pk__in=known, is_active=True)

    def create_user(self, claims: dict[str, Any]) -> Any:
        with transaction.atomic():
            wanted = claims.get("preferred_username") or claims.get("email", "").split("@")[0]
            user = self.UserModel.objects.create_user(
                free_username(str(wanted)), email=claims.get("email", "")
            )
            SignOnIdentity.objects.create(
                user=user, issuer=settings.OIDC_ISSUER, subject=claims["sub"]
            )
            follow_groups(user, groups_of(claims))
        return user

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        follow_groups(user, groups_of(claims))
        return user
