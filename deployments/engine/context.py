"""What the editor knows about where the settings will run: the model, the variant, the vLLM
version, the size of each copy and the memory of the accelerator it runs on.

Suggestions, presets and warnings are all computed from one EngineContext, so the wizard (before
the deployment exists) and the editor of a deployment give the same answers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import placement
from catalog.facts import engine_settings, model_facts
from catalog.models import Model, Variant
from placement import shares


@dataclass(frozen=True)
class EngineContext:
    model: Model
    variant: Variant
    version: str  # the vLLM version whose flags apply
    size: float = 1.0  # accelerators per copy
    gpu_memory_bytes: int | None = None  # one accelerator a copy runs on; None: not known
    gpu_product: str = ""
    on_cpu: bool = False  # the cluster's machines host on their CPUs (vLLM's CPU build)

    @property
    def engine(self) -> str:
        return self.variant.engine

    @property
    def tensor_parallel(self) -> int:
        return shares.tensor_parallel(self.size)

    def share_limit(self) -> float:
        """The highest memory share the engine may be given for a copy of this size."""
        return shares.share_limit(self.size)

    def default_share(self) -> float:
        return shares.default_share(self.size)

    def share(self, settings: dict[str, Any]) -> float:
        return shares.engine_share(self.size, settings.get("gpu_memory_utilization"))

    def budget_bytes(self, settings: dict[str, Any]) -> int | None:
        """The memory the engine of one copy may use on each of its accelerators."""
        if not self.gpu_memory_bytes:
            return None
        return int(self.gpu_memory_bytes * self.share(settings))

    def facts(self) -> placement.ModelFacts:
        return model_facts(self.model, self.variant)

    def placement_engine(self, settings: dict[str, Any]) -> placement.EngineSettings:
        """Placement's view of the settings (raises ValueError for impossible combinations)."""
        return engine_settings(self.model, self.variant, settings)

    def estimate(self, settings: dict[str, Any]) -> placement.Estimate:
        return placement.estimate_copy(
            self.facts(), self.placement_engine(settings), self.tensor_parallel
        )

    def largest_context(self, settings: dict[str, Any]) -> int | None:
        """The longest conversation that fits one copy's memory; None when it is not known."""
        budget = self.budget_bytes(settings)
        if budget is None:
            return None
        engine = dataclasses.replace(self.placement_engine(settings), max_model_len=None)
        return placement.largest_context(self.facts(), engine, budget, self.tensor_parallel)


def nice_context(tokens: int) -> int:
    """A round context length at most `tokens`: a power of two from 1,024 up, else tokens."""
    if tokens < 1024:
        return tokens
    nice = 1024
    while nice * 2 <= tokens:
        nice *= 2
    return nice
