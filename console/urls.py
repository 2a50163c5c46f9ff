from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import api_v1
from console.views import account, events, keys, sign_on, system, teams
from deployments.views import notifications

admin.site.site_header = "Berth administration"
admin.site.site_title = "Berth admin"
# Error pages in words, and API paths' errors in the API's JSON (console/errors.py).
handler403 = "console.errors.permission_denied"
handler404 = "console.errors.page_not_found"
handler500 = "console.errors.server_error"

urlpatterns = [
    path("", system.home, name="home"),
    path("health", system.health, name="health"),
    path("health/web", system.health_web, name="health_web"),
    path("status/", system.platform_status, name="platform_status"),
    path("login/", sign_on.login, name="login"),
    path("login/sso/", sign_on.sign_on_start, name="oidc_authentication_init"),
    path("login/sso/callback/", sign_on.sign_on_callback, name="oidc_authentication_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", account.account, name="account"),
    path("account/time-zone/", account.set_time_zone, name="account_time_zone"),
    path("account/password/", account.change_password, name="account_password"),
    path("account/api-keys/", keys.api_keys, name="api_keys"),
    path("account/api-keys/<int:pk>/revoke/", keys.revoke_api_key, name="revoke_api_key"),
    path("events/", events.event_list, name="event_list"),
    path("events/export.csv", events.export_events, name="export_events"),
    path("teams/<slug:name>/", teams.team_detail, name="team_detail"),
    path("teams/<slug:name>/members/add/", teams.add_team_member, name="team_add_member"),
    path("teams/<slug:name>/members/<int:pk>/role/", teams.change_team_role, name="team_role"),
    path(
        "teams/<slug:name>/members/<int:pk>/remove/",
        teams.remove_team_member,
        name="team_remove_member",
    ),
    path("teams/<slug:name>/hf-token/", teams.set_team_hf_token, name="team_hf_token"),
    path(
        "teams/<slug:name>/hf-token/clear/", teams.clear_team_hf_token, name="team_hf_token_clear"
    ),
    path("teams/<slug:name>/notifications/", notifications.webhooks, name="team_webhooks"),
    path(
        "teams/<slug:name>/notifications/<int:pk>/",
        notifications.delivery_log,
        name="team_webhook_log",
    ),
    path(
        "teams/<slug:name>/notifications/<int:pk>/enable/",
        notifications.enable_webhook,
        name="team_webhook_enable",
    ),
    path(
        "teams/<slug:name>/notifications/<int:pk>/disable/",
        notifications.disable_webhook,
        name="team_webhook_disable",
    ),
    path(
        "teams/<slug:name>/notifications/<int:pk>/delete/",
        notifications.delete_webhook,
        name="team_webhook_delete",
    ),
    path(
        "teams/<slug:name>/notifications/<int:pk>/test/",
        notifications.test_webhook,
        name="team_webhook_test",
    ),
    path("teams/<slug:name>/notifications/email/", notifications.add_email, name="team_email_add"),
    path(
        "teams/<slug:name>/notifications/email/<int:pk>/",
        notifications.email_log,
        name="team_email_log",
    ),
    path(
        "teams/<slug:name>/notifications/email/<int:pk>/enable/",
        notifications.enable_email,
        name="team_email_enable",
    ),
    path(
        "teams/<slug:name>/notifications/email/<int:pk>/disable/",
        notifications.disable_email,
        name="team_email_disable",
    ),
    path(
        "teams/<slug:name>/notifications/email/<int:pk>/delete/",
        notifications.delete_email,
        name="team_email_delete",
    ),
    path(
        "teams/<slug:name>/notifications/email/<int:pk>/test/",
        notifications.test_email,
        name="team_email_test",
    ),
    path("deployments/", include("deployments.urls")),
    path("models/", include("catalog.urls")),
    path("clusters/", include("clusters.urls")),
    path("chat/", include("gateway.urls")),
    path("quotas/", include("gateway.quota_urls")),
    path("usage/", include("gateway.usage_urls")),
    path("api/v1/", api_v1.api.urls),
    path("admin/", admin.site.urls),
]
