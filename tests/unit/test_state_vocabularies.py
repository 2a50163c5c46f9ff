"""Every state of every vocabulary carries its badge colour, and the one badge filter shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.template import Context, Template
from django.template.loader import render_to_string

from catalog.models import ServerModel, ServerModelState
from clusters.models import Cluster, ClusterState
from console.choices import Badge, StateChoices
from deployments.choices import (
    CopyState,
    DeliveryState,
    DeploymentState,
    MachineFilesState,
    MoveState,
    RevisionOutcome,
)
from deployments.models import Copy, Deployment, MachineFiles

VOCABULARIES = [
    DeploymentState,
    CopyState,
    ServerModelState,
    MachineFilesState,
    ClusterState,
    DeliveryState,
    MoveState,
    RevisionOutcome,
]
STATES = [state for vocabulary in VOCABULARIES for state in vocabulary]
CSS = Path(__file__).resolve().parents[2] / "static" / "css" / "berth.css"


def test_the_list_names_every_vocabulary():
    assert set(StateChoices.__subclasses__()) == set(VOCABULARIES)


@pytest.mark.parametrize("state", STATES, ids=lambda state: f"{type(state).__name__}.{state.name}")
def test_every_state_has_a_colour_the_stylesheet_defines(state):
    assert isinstance(state.colour, Badge)
    assert f".badge-{state.colour} " in CSS.read_text()


@pytest.mark.parametrize("state", STATES, ids=lambda state: f"{type(state).__name__}.{state.name}")
def test_the_badge_filter_renders_each_state_in_its_colour(state):
    page = Template("{% load berth %}{{ state|badge }}").render(Context({"state": state}))
    assert page == state.colour


@pytest.mark.parametrize("state", STATES, ids=lambda state: f"{type(state).__name__}.{state.name}")
def test_the_badge_partial_shows_each_state_with_its_colour_and_label(state):
    page = render_to_string("partials/badge.html", {"state": state, "label": state.label})
    assert page.strip() == (
        f'<span class="badge badge-{state.colour}" data-state="{state.value}">{state.label}</span>'
    )


def test_text_that_is_no_state_gets_the_grey_badge():
    page = Template("{% load berth %}{{ state|badge }}").render(Context({"state": "FAILED"}))
    assert page == "grey"


def test_a_rows_state_is_its_vocabularys_state_however_it_is_set():
    deployment = Deployment(state="DEGRADED")
    assert deployment.state is DeploymentState.DEGRADED
    deployment.state = "FAILED"
    assert deployment.state is DeploymentState.FAILED
    assert Copy(state="PENDING").state is CopyState.PENDING
    assert ServerModel().state is ServerModelState.QUEUED
    assert MachineFiles(state="present").state is MachineFilesState.PRESENT
    assert Cluster(state="unreachable").state is ClusterState.UNREACHABLE


def test_one_value_in_two_vocabularies_takes_each_ones_colour():
    assert DeploymentState.MUST_REDOWNLOAD.colour == "red"
    assert ServerModelState.MUST_REDOWNLOAD.colour == "amber"
    assert Deployment(state="STOPPED").state.colour == "grey"
    assert Copy(state="READY").state.colour == "green"


def test_a_value_outside_the_vocabulary_stays_as_it_is_for_validation_to_refuse():
    assert type(Deployment(state="BOGUS").state) is str
