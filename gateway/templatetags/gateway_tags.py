"""Tags for the deployment page's gateway partials: each computes its own context from the
deployment, so a page includes them with nothing more than ``deployment`` in its context."""

from __future__ import annotations

from typing import Any

from django import template

from gateway.views import panel

register = template.Library()


@register.simple_tag(takes_context=True)
def gateway_endpoints(context: template.Context, deployment: Any) -> dict[str, Any]:
    return panel.endpoints(context["request"], deployment)


@register.simple_tag
def gateway_figures(deployment: Any) -> dict[str, Any]:
    return panel.figures(deployment)
