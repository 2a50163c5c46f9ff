"""URLs of the hosting wizard, the engine-settings editor and the scale dialog.

Included under /deployments/ by deployments/urls.py. Entry points of the wizard:
/deployments/new/ (Model step first), /deployments/new/?model=ID, /deployments/new/?cluster=ID.
"""

from django.urls import path

from deployments import editor, scale_dialog, wizard

urlpatterns = [
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
    path("<int:pk>/scale/dialog/", scale_dialog.scale_dialog, name="deployment_scale_dialog"),
    path("<int:pk>/scale/fit/", scale_dialog.scale_fit, name="deployment_scale_fit"),
]
