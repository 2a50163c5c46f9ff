from django.urls import path

from catalog import views

urlpatterns = [
    path("", views.marketplace, name="marketplace"),
    path("<int:pk>/", views.model_detail, name="model_detail"),
    path("on-this-server/", views.server_models, name="server_models"),
]
