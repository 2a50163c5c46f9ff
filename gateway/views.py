"""The chat page. The OpenAI-compatible gateway itself comes with the gateway issue."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.access import visible_deployments
from deployments.choices import DEPLOYMENT_SERVING


def chat(request: HttpRequest) -> HttpResponse:
    offered = (
        visible_deployments(request.user).filter(state__in=DEPLOYMENT_SERVING).exclude(chat_name="")
    )
    names = sorted(set(offered.values_list("chat_name", flat=True)))
    return render(request, "gateway/chat.html", {"chat_names": names})
