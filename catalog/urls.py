from django.urls import path

from catalog import views

urlpatterns = [
    path("", views.marketplace, name="marketplace"),
    path("add/", views.add_model, name="add_model"),
    path("add-from-path/", views.add_model_from_path, name="add_model_from_path"),
    path("<int:pk>/", views.model_detail, name="model_detail"),
    path("<int:pk>/download/", views.download, name="download_model"),
    path("<int:pk>/ask-code-trust/", views.ask_code_trust, name="ask_code_trust"),
    path("on-this-server/", views.server_models, name="server_models"),
    path("on-this-server/<int:pk>/row/", views.server_model_row, name="server_model_row"),
    path("on-this-server/<int:pk>/try-again/", views.try_again, name="server_model_try_again"),
    path("on-this-server/<int:pk>/delete/", views.delete_files, name="server_model_delete"),
]
