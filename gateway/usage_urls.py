from django.urls import path

from gateway.views import usage as views

urlpatterns = [
    path("", views.usage, name="usage"),
    path("export.csv", views.export_usage, name="export_usage"),
]
