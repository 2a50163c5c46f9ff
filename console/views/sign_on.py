"""Logging in: with a password, or through the single sign-on provider (console/sso.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from mozilla_django_oidc import views as oidc_views

from console import sso
from console.access import is_platform_admin

NOT_CONFIGURED = "Single sign-on is not set up on this console (BERTH_OIDC_ISSUER is unset)."


class PasswordLoginForm(AuthenticationForm):
    """Django's login form; with BERTH_PASSWORD_LOGIN=staff, for platform admins only."""

    def confirm_login_allowed(self, user: Any) -> None:
        super().confirm_login_allowed(user)
        if settings.PASSWORD_LOGIN == "staff" and not is_platform_admin(user):
            raise ValidationError(
                "Only platform admins log in with a password here: use “Log in with single "
                "sign-on”.",
                code="single_sign_on_only",
            )


class LoginPage(auth_views.LoginView):
    authentication_form = PasswordLoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "single_sign_on": sso.configured()}


class SignOnStart(oidc_views.OIDCAuthenticationRequestView):
    """Sends the browser to the provider (its endpoint from the discovery document)."""

    get_settings = staticmethod(sso.setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Past the library's __init__, which reads the provider's endpoint: here it is read in
        # get(), so that a provider that cannot be reached is said on the login page.
        super(oidc_views.OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not sso.configured():
            raise Http404(NOT_CONFIGURED)
        try:
            self.OIDC_OP_AUTH_ENDPOINT = sso.setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except sso.SignOnRefused as unavailable:
            return LoginPage.as_view(extra_context={"sign_on_error": str(unavailable)})(request)
        return super().get(request)


class SignOnCallback(oidc_views.OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; a refusal's words show on the login page."""

    get_settings = staticmethod(sso.setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not sso.configured():
            raise Http404(NOT_CONFIGURED)
        return super().get(request)


login = login_not_required(LoginPage.as_view())
sign_on_start = login_not_required(SignOnStart.as_view())
sign_on_callback = login_not_required(SignOnCallback.as_view())
