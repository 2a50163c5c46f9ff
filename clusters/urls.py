from django.urls import path

from clusters import views

urlpatterns = [
    path("", views.cluster_list, name="cluster_list"),
    path("<int:pk>/", views.cluster_detail, name="cluster_detail"),
]
