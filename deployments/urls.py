from django.urls import path

from deployments import views

urlpatterns = [
    path("", views.deployment_list, name="deployment_list"),
    path("<int:pk>/", views.deployment_detail, name="deployment_detail"),
]
