"""What the gateway measured, per deployment and minute (flushed from memory once a minute)."""

from __future__ import annotations

from django.db import models


class MinuteFigures(models.Model):
    """One deployment's traffic in one minute, as the gateway saw it.

    Sums and counts rather than averages, so that several gateway processes (or two flushes of
    one minute) add up correctly. It outlives its deployment, like the audit events.
    """

    deployment = models.ForeignKey(
        "deployments.Deployment",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="minute_figures",
    )
    deployment_name = models.CharField(max_length=63)
    minute = models.DateTimeField(help_text="start of the minute (UTC)")
    requests = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    timeouts = models.PositiveIntegerField(default=0, help_text="replies past the reply wait")
    ttft_sum_s = models.FloatField(default=0.0)
    ttft_count = models.PositiveIntegerField(default=0)
    latency_sum_s = models.FloatField(default=0.0)
    latency_count = models.PositiveIntegerField(default=0)
    generated_tokens = models.PositiveBigIntegerField(default=0)
    generation_s = models.FloatField(default=0.0)

    class Meta:
        ordering = ["deployment_name", "minute"]
        verbose_name_plural = "minute figures"
        constraints = [
            # By deployment, not by name: a name used again by another team starts afresh.
            models.UniqueConstraint(
                fields=["deployment", "minute"], name="minute_figures_one_row_per_deployment"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_name} at {self.minute:%Y-%m-%d %H:%M}: {self.requests} requests"
