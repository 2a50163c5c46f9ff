from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import api, api_v1, views

admin.site.site_header = "Berth administration"
admin.site.site_title = "Berth admin"

urlpatterns = [
    path("", views.home, name="home"),
    path("health", views.health, name="health"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", views.account, name="account"),
    path("account/time-zone/", views.set_time_zone, name="account_time_zone"),
    path("account/password/", views.change_password, name="account_password"),
    path("account/api-keys/", views.api_keys, name="api_keys"),
    path("account/api-keys/<int:pk>/revoke/", views.revoke_api_key, name="revoke_api_key"),
    path("events/", views.event_list, name="event_list"),
    path("events/export.csv", views.export_events, name="export_events"),
    path("teams/<slug:name>/", views.team_detail, name="team_detail"),
    path("teams/<slug:name>/members/add/", views.add_team_member, name="team_add_member"),
    path("teams/<slug:name>/members/<int:pk>/role/", views.change_team_role, name="team_role"),
    path(
        "teams/<slug:name>/members/<int:pk>/remove/",
        views.remove_team_member,
        name="team_remove_member",
    ),
    path("teams/<slug:name>/hf-token/", views.set_team_hf_token, name="team_hf_token"),
    path(
        "teams/<slug:name>/hf-token/clear/", views.clear_team_hf_token, name="team_hf_token_clear"
    ),
    path("deployments/", include("deployments.urls")),
    path("models/", include("catalog.urls")),
    path("clusters/", include("clusters.urls")),
    path("chat/", include("gateway.urls")),
    path("api/v1/me", api.me, name="api_me"),
    path("api/v1/", api_v1.api.urls),
    path("admin/", admin.site.urls),
]
