"""manage.py addcluster for the kinds besides Ray (tests/integration/test_ray_clusters.py has
Ray's): the admin form's checks and words, exit code 1 (CommandError) on refusal, nothing
saved; a simulator's machines discovered at once."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from clusters.models import Cluster
from tests.integration.test_lifecycle import H100

pytestmark = pytest.mark.django_db


def test_a_simulator_is_added_from_its_spec_and_its_machines_discovered(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    gpus = [{**H100, "index": i, "uuid": f"GPU-add-{i}"} for i in range(2)]
    machine = {"name": "add-1", "cpus": 8, "system_memory_gib": 64, "accelerators": gpus}
    spec.write_text(json.dumps({"machines": [machine]}))
    call_command("addcluster", "added", "--kind", "simulator", "--spec", str(spec))
    cluster = Cluster.objects.get(name="added")
    assert cluster.sharing_strategy == "fractional"
    assert cluster.machines.get(name="add-1").accelerators.count() == 2
    assert "Added simulator cluster added." in capsys.readouterr().out


@pytest.mark.parametrize(
    "arguments,words",
    [
        (["bad name", "--kind", "standalone"], "NAME: "),
        (["sim", "--kind", "simulator"], "--kind simulator needs --spec FILE"),
        (["sim", "--kind", "simulator", "--spec", "/nonexistent.json"], "--spec /nonexistent.json: cannot read it"),
        (["k8s", "--kind", "kubernetes"], "--kind kubernetes needs --kubeconfig FILE"),
        (["k8s", "--kind", "standalone", "--namespace", "x"], "--namespace is for --kind kubernetes only"),
        (["k8s", "--kind", "simulator", "--address", "http://h:1"], "--address is for --kind ray only"),
        (["s", "--kind", "standalone", "--repack-policy", "always"], "--repack-policy: Select a valid choice. always is not one"),
        (["s", "--kind", "standalone", "--consolidate-window", "2-5"], "--consolidate-window: '2-5' is not a time window: write it as HH:MM-HH:MM, e.g. 02:00-05:00"),
        (["s", "--kind", "standalone", "--consolidate-window", "24:00-05:00"], "is not a time window"),
        (["s", "--kind", "standalone", "--consolidate-window", "02:00-02:00"], "'02:00-02:00' starts and ends at the same time"),
        (["s", "--kind", "standalone", "--consolidate-above", "150"], "--consolidate-above: Ensure this value is less than or equal to 100."),
        (["s", "--kind", "standalone", "--consolidate-above", "lots"], "--consolidate-above: Enter a whole number."),
        (["s", "--kind", "standalone", "--consolidate-below-load", "-1"], "--consolidate-below-load: Ensure this value is greater than or equal to 0."),
    ],
)  # fmt: skip
def test_bad_input_is_refused_in_words_and_nothing_is_saved(arguments, words):
    with pytest.raises(CommandError) as refused:
        call_command("addcluster", *arguments)
    assert words in str(refused.value)
    assert not Cluster.objects.exists()


def test_a_spec_or_kubeconfig_that_is_not_one_is_refused_as_the_admin_refuses_it(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text("machines: none")
    with pytest.raises(CommandError) as not_json:
        call_command("addcluster", "sim", "--kind", "simulator", "--spec", str(spec))
    assert "--spec: " in str(not_json.value) and "JSON" in str(not_json.value)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("not: a kubeconfig")
    with pytest.raises(CommandError) as not_kubeconfig:
        call_command("addcluster", "k8s", "--kind", "kubernetes", "--kubeconfig", str(kubeconfig))
    assert str(not_kubeconfig.value).startswith("--kubeconfig: ")
    assert not Cluster.objects.exists()


def test_a_cluster_that_consolidates_keeps_its_window_threshold_and_load(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"machines": []}))
    call_command("addcluster", "packed", "--kind", "simulator", "--spec", str(spec),
                 "--repack-policy", "consolidate", "--consolidate-window", "22:00-04:30",
                 "--consolidate-above", "40", "--consolidate-below-load", "0.5")  # fmt: skip
    cluster = Cluster.objects.get(name="packed")
    assert (cluster.repack_policy, cluster.consolidate_window) == ("consolidate", "22:00-04:30")
    assert (cluster.consolidate_above_percent, cluster.consolidate_below_load) == (40, 0.5)
    call_command("addcluster", "plain", "--kind", "simulator", "--spec", str(spec))
    assert Cluster.objects.get(name="plain").repack_policy == "off"
