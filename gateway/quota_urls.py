from django.urls import path

from gateway.views import quotas as views

urlpatterns = [
    path("set/", views.set_quota, name="set_quota"),
    path("<int:pk>/remove/", views.remove_quota, name="remove_quota"),
]
