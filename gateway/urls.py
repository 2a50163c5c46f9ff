from django.urls import path

from gateway import views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("send", views.chat_send, name="chat_send"),
]
