"""Engine lines stored before redaction existed may hold a copy's key (vLLM's start-up line
lists a key given on its command line): scrub them with today's rule, and the error messages
taken from them."""

from django.db import migrations

from console import crypto
from deployments.redaction import redact


def key_of(copy) -> str:
    encrypted = copy.engine_api_key_encrypted
    return crypto.decrypt(encrypted) if encrypted else ""


def scrub_lines(apps, schema_editor) -> None:
    Copy = apps.get_model("deployments", "Copy")
    LogLine = apps.get_model("deployments", "LogLine")
    Deployment = apps.get_model("deployments", "Deployment")
    with_keys = list(Copy.objects.exclude(engine_api_key_encrypted=""))
    keys = {copy.pk: key_of(copy) for copy in with_keys}
    keys_of_deployment: dict[int, list[str]] = {}
    for copy in with_keys:
        keys_of_deployment.setdefault(copy.deployment_id, []).append(keys[copy.pk])
    for line in LogLine.objects.filter(stream="engine").iterator(chunk_size=2000):
        clean = redact(line.text, [keys.get(line.copy_id, "")])
        if clean != line.text:
            LogLine.objects.filter(pk=line.pk).update(text=clean)
    for copy in Copy.objects.exclude(last_error_message=""):
        clean = redact(copy.last_error_message, [keys.get(copy.pk, "")])
        if clean != copy.last_error_message:
            Copy.objects.filter(pk=copy.pk).update(last_error_message=clean)
    for deployment in Deployment.objects.exclude(last_error_message=""):
        clean = redact(deployment.last_error_message, keys_of_deployment.get(deployment.pk, []))
        if clean != deployment.last_error_message:
            Deployment.objects.filter(pk=deployment.pk).update(last_error_message=clean)


class Migration(migrations.Migration):
    dependencies = [("deployments", "0005_engine_figures")]

    operations = [migrations.RunPython(scrub_lines, migrations.RunPython.noop)]
