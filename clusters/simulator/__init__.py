"""The engine simulator: a process that stands in for ``vllm serve`` without a GPU.

Start it with ``serve_argv(model, *flags)`` and an environment from ``build_env(...)``; see
``clusters.simulator.engine`` for the argv and environment contract. This package never imports
Django or ``placement``: it keeps its own model of vLLM's memory so that it can prove a
placement wrong.
"""

from clusters.simulator.contract import build_env, env_names, parse_bytes, serve_argv

__all__ = ["build_env", "env_names", "parse_bytes", "serve_argv"]
