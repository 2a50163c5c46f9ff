from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import api, api_v1, views

admin.site.site_header = "Berth administration"
admin.site.site_title = "Berth admin"
# Error pages in words, and API paths' errors in the API's JSON (console/errors.py).
handler403 = "console.errors.permission_denied"
handler404 = "console.errors.page_not_found"
handler500 = "console.errors.server_error"

urlpatterns = [
    path("", views.home, name="home"),
    path("health", views.health, name="health"),
    path("health/web", views.health_web, name="health_web"),
    path("status/", views.platform_status, name="platform_status"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/api-keys/", views.api_keys, name="api_keys"),
    path("account/api-keys/<int:pk>/revoke/", views.revoke_api_key, name="revoke_api_key"),
    path("deployments/", include("deployments.urls")),
    path("models/", include("catalog.urls")),
    path("clusters/", include("clusters.urls")),
    path("chat/", include("gateway.urls")),
    path("api/v1/me", api.me, name="api_me"),
    path("api/v1/", api_v1.api.urls),
    path("admin/", admin.site.urls),
]
