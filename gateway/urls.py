from django.urls import path

from gateway.views import chat as views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("send", views.chat_send, name="chat_send"),
]
