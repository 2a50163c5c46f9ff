"""Berth's Python SDK: host models on your GPU clusters from code.

    from berth_sdk import BerthClient

    client = BerthClient()  # BERTH_URL and BERTH_API_KEY, or what `berth login` stored
    deployment_id = client.serving.deploy_model(repo_id="Qwen/Qwen3-0.6B")

See BerthClient (and AsyncBerthClient), the results in berth_sdk.results and the errors in
berth_sdk.errors. The `berth` command line is built on the same client.
"""

from __future__ import annotations

__version__ = "0.1.0"

from berth_sdk.client import AsyncBerthClient, BerthClient  # noqa: E402
from berth_sdk.config_files import ApplyPlan, PlanItem  # noqa: E402
from berth_sdk.errors import (  # noqa: E402
    APIConnectionError,
    APITimeoutError,
    ApplyRefusedError,
    AuthenticationError,
    BadRequestError,
    BerthAPIError,
    BerthError,
    ConfigurationError,
    ConflictError,
    DeploymentFailedError,
    DeploymentTimeoutError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    UnprocessableError,
)
from berth_sdk.results import (  # noqa: E402
    Autoscaling,
    Cluster,
    CostDay,
    CostItem,
    CostReport,
    Deployment,
    DeploymentCopy,
    DeploymentStatus,
    Download,
    Estimate,
    Event,
    FitCheck,
    HostedDeployment,
    Identity,
    LogLine,
    Model,
    Move,
    Revision,
    RevisionChange,
    UsageRow,
    Variant,
)

__all__ = [
    "APIConnectionError",
    "APITimeoutError",
    "ApplyPlan",
    "ApplyRefusedError",
    "AsyncBerthClient",
    "Autoscaling",
    "AuthenticationError",
    "BadRequestError",
    "BerthAPIError",
    "BerthClient",
    "BerthError",
    "Cluster",
    "ConfigurationError",
    "CostDay",
    "CostItem",
    "CostReport",
    "ConflictError",
    "Deployment",
    "DeploymentCopy",
    "DeploymentFailedError",
    "DeploymentStatus",
    "DeploymentTimeoutError",
    "Download",
    "Estimate",
    "Event",
    "FitCheck",
    "Move",
    "PlanItem",
    "HostedDeployment",
    "Identity",
    "LogLine",
    "Model",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "Revision",
    "RevisionChange",
    "ServerError",
    "UnprocessableError",
    "UsageRow",
    "Variant",
    "__version__",
]
