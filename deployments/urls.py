from django.urls import path

from deployments.views import deployments as views
from deployments.views import editor, logs, revisions, scale, wizard

urlpatterns = [
    path("", views.deployment_list, name="deployment_list"),
    path("bulk/", views.bulk, name="deployment_bulk"),
    path("<int:pk>/", views.deployment_detail, name="deployment_detail"),
    path("<int:pk>/scale/", views.scale, name="deployment_scale"),
    path("<int:pk>/autoscaling/", views.set_autoscaling, name="deployment_autoscaling"),
    path("<int:pk>/stop/", views.stop, name="deployment_stop"),
    path("<int:pk>/start/", views.start, name="deployment_start"),
    path("<int:pk>/delete/", views.delete, name="deployment_delete"),
    path("<int:pk>/check/", views.check_now, name="deployment_check_now"),
    path("<int:pk>/sync/", views.sync_files, name="deployment_sync_files"),
    path("<int:pk>/chat-name/", views.offer_in_chat, name="deployment_offer_in_chat"),
    path("<int:pk>/reply-wait/", views.reply_wait, name="deployment_reply_wait"),
    path("<int:pk>/routing/", views.routing, name="deployment_routing"),
    path("<int:pk>/queue/", views.queue, name="deployment_queue"),
    path("<int:pk>/logs/", logs.deployment_logs, name="deployment_logs"),
    path("<int:pk>/revisions/", revisions.deployment_revisions, name="deployment_revisions"),
    path("<int:pk>/revisions/rollback/", revisions.roll_back, name="deployment_rollback"),
    path(
        "<int:pk>/revisions/auto-rollback/",
        revisions.auto_rollback,
        name="deployment_auto_rollback",
    ),
    path("<int:pk>/logs/download/", logs.download_logs, name="deployment_logs_download"),
    # the hosting wizard (entry points: new/, new/?model=ID, new/?cluster=ID), the
    # engine-settings editor and the scale dialog
    path("new/", wizard.start, name="wizard_start"),
    path("new/mode/", wizard.set_mode, name="wizard_mode"),
    path("new/<str:draft_id>/model/", wizard.model_step, name="wizard_model"),
    path("new/<str:draft_id>/where/", wizard.where_step, name="wizard_where"),
    path("new/<str:draft_id>/where/fit/", wizard.fit, name="wizard_fit"),
    path("new/<str:draft_id>/settings/", wizard.settings_step, name="wizard_settings"),
    path(
        "new/<str:draft_id>/settings/check/",
        wizard.settings_check,
        name="wizard_settings_check",
    ),
    path("new/<str:draft_id>/review/", wizard.review_step, name="wizard_review"),
    path("<int:pk>/settings/", editor.engine_settings, name="deployment_engine_settings"),
    path(
        "<int:pk>/settings/check/",
        editor.check_settings,
        name="deployment_engine_settings_check",
    ),
    path("<int:pk>/scale/dialog/", scale.scale_dialog, name="deployment_scale_dialog"),
    path("<int:pk>/scale/fit/", scale.scale_fit, name="deployment_scale_fit"),
]
