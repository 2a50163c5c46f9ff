"""Run on a Ray node, as a task pinned to it: what NVML reports there of the node's GPUs.

Shipped to the nodes by value, like the copy's actor (actor.py): it imports nothing of Berth's.
NVML's Python binding is nvidia-ml-py's where the node has it, else the copy Ray carries on every
node (Ray counts a node's GPUs with it).
"""

from __future__ import annotations

from typing import Any


def nvml_binding() -> Any:
    try:
        import pynvml
    except ImportError:
        from ray._private.thirdparty import pynvml  # type: ignore[no-redef]
    return pynvml


def gpus_here() -> dict[str, Any]:
    """{"devices": [{"index", "name", "memory_bytes"}, …]} as NVML reports them on this node, or
    {"error": NVML's words} where it cannot say (no driver, no library)."""
    nvml = nvml_binding()
    try:
        nvml.nvmlInit()
    except Exception as error:
        return {"error": f"NVML does not start there: {error}"}
    try:
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            devices.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                }
            )
        return {"devices": devices}
    except Exception as error:
        return {"error": f"NVML failed there: {error}"}
    finally:
        shut_down(nvml)


def shut_down(nvml: Any) -> None:
    """NVML counts its initialisations: each is ended, and a failure to end changes nothing."""
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass
