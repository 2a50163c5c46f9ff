from django.urls import include, path

from deployments import logs_view, views

urlpatterns = [
    path("", views.deployment_list, name="deployment_list"),
    path("", include("deployments.wizard_urls")),  # wizard, engine-settings editor, scale dialog
    path("<int:pk>/", views.deployment_detail, name="deployment_detail"),
    path("<int:pk>/scale/", views.scale, name="deployment_scale"),
    path("<int:pk>/stop/", views.stop, name="deployment_stop"),
    path("<int:pk>/start/", views.start, name="deployment_start"),
    path("<int:pk>/delete/", views.delete, name="deployment_delete"),
    path("<int:pk>/check/", views.check_now, name="deployment_check_now"),
    path("<int:pk>/sync/", views.sync_files, name="deployment_sync_files"),
    path("<int:pk>/chat-name/", views.offer_in_chat, name="deployment_offer_in_chat"),
    path("<int:pk>/reply-wait/", views.reply_wait, name="deployment_reply_wait"),
    path("<int:pk>/logs/", logs_view.deployment_logs, name="deployment_logs"),
    path("<int:pk>/logs/download/", logs_view.download_logs, name="deployment_logs_download"),
]
