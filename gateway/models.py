"""What the gateway measured, per deployment and minute (flushed from memory once a minute)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
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


class UsedBy(models.Model):
    """Who used the gateway: a key, its user and the team served (emptied when deleted)."""

    api_key = models.ForeignKey(
        "console.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    team = models.ForeignKey(
        "console.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        abstract = True


class UsageRecord(UsedBy):
    """One request through the gateway: who asked (key, user, team), what served it and how much.

    Written in batches by the gateway (gateway/usage.py), at most a second after the reply; kept
    BERTH_USAGE_DAYS and rolled up per hour into UsageHour. Like MinuteFigures it outlives what it
    names: a deleted key, user, team or deployment leaves its id empty and its name in place.
    """

    at = models.DateTimeField(help_text="when the request came in (UTC)")
    deployment = models.ForeignKey(
        "deployments.Deployment",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="usage_records",
    )
    deployment_name = models.CharField(max_length=63)
    copy_id = models.PositiveBigIntegerField(null=True, blank=True, help_text="the copy served it")
    model = models.CharField(max_length=255, help_text="the model name the client asked for")
    prompt_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="the engine's count; empty when it reported none"
    )
    completion_tokens = models.PositiveIntegerField(
        default=0, help_text="the engine's count, else counted from the stream"
    )
    ttft_s = models.FloatField(null=True, blank=True, help_text="time to first token")
    duration_s = models.FloatField()
    status = models.PositiveSmallIntegerField(help_text="the HTTP status the client got")

    class Meta:
        ordering = ["-at"]
        indexes = [
            models.Index(fields=["team", "at"], name="usage_by_team"),
            models.Index(fields=["api_key", "at"], name="usage_by_key"),
            models.Index(fields=["user", "at"], name="usage_by_user"),
            models.Index(fields=["deployment", "at"], name="usage_by_deployment"),
            models.Index(fields=["at"], name="usage_by_time"),
        ]

    def __str__(self) -> str:
        return f"{self.model} at {self.at:%Y-%m-%d %H:%M:%S}: {self.status}"


class UsageHour(UsedBy):
    """One hour of usage records summed per key, user, team and deployment (gateway/usage.py
    rolls each finished hour up; the usage API reads these for whole hours)."""

    hour = models.DateTimeField(help_text="start of the hour (UTC)")
    deployment = models.ForeignKey(
        "deployments.Deployment",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="usage_hours",
    )
    deployment_name = models.CharField(max_length=63)
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    ttft_sum_s = models.FloatField(default=0.0)
    ttft_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["hour"]
        indexes = [
            models.Index(fields=["team", "hour"], name="usage_hour_by_team"),
            models.Index(fields=["api_key", "hour"], name="usage_hour_by_key"),
            models.Index(fields=["user", "hour"], name="usage_hour_by_user"),
            models.Index(fields=["deployment", "hour"], name="usage_hour_by_deployment"),
            models.Index(fields=["hour"], name="usage_hour_by_time"),
        ]

    def __str__(self) -> str:
        return f"{self.deployment_name} at {self.hour:%Y-%m-%d %H}h: {self.requests} requests"


class Quota(models.Model):
    """A limit on one API key, one team (all of its deployments' traffic) or one deployment,
    held across every gateway process by counters in Redis (gateway/quotas.py). Each limit is
    optional; a shadow quota only counts and reports the refusals it would have made."""

    api_key = models.OneToOneField(
        "console.ApiKey", on_delete=models.CASCADE, null=True, blank=True, related_name="quota"
    )
    team = models.OneToOneField(
        "console.Team", on_delete=models.CASCADE, null=True, blank=True, related_name="quota"
    )
    deployment = models.OneToOneField(
        "deployments.Deployment",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="quota",
    )
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)
    tokens_per_month = models.PositiveBigIntegerField(null=True, blank=True)
    requests_per_minute = models.PositiveBigIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveBigIntegerField(null=True, blank=True)
    shadow = models.BooleanField(
        default=False, help_text="only count and report what it would refuse; never refuse"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    LIMITS = ("tokens_per_day", "tokens_per_month", "requests_per_minute", "tokens_per_minute")

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(api_key__isnull=False, team__isnull=True, deployment__isnull=True)
                    | models.Q(api_key__isnull=True, team__isnull=False, deployment__isnull=True)
                    | models.Q(api_key__isnull=True, team__isnull=True, deployment__isnull=False)
                ),
                name="quota_names_one_subject",
                violation_error_message=(
                    "A quota names exactly one of an API key, a team or a deployment."
                ),
            )
        ]

    def __str__(self) -> str:
        return f"quota {self.pk}"

    def clean(self) -> None:
        """The limits' rules of gateway/quotas.py, as forms and the admin check them (the one
        subject is the constraint's)."""
        from gateway.quotas import QuotaRefused, checked_limits

        try:
            checked_limits({name: getattr(self, name) for name in self.LIMITS})
        except QuotaRefused as refused:
            if refused.field in self.LIMITS:
                raise ValidationError({refused.field: refused.message}) from None
            raise ValidationError({NON_FIELD_ERRORS: str(refused)}) from None

    def limits(self) -> dict[str, int]:
        """The limits set, by field name."""
        return {name: value for name in self.LIMITS if (value := getattr(self, name)) is not None}
