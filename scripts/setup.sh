#!/usr/bin/env bash
# Installs what rlplay needs on a fresh Debian or Ubuntu machine, skipping what is already there:
# Chromium (the browser tests; never `playwright install`) and libvulkan1 (SwiftShader's Vulkan
# loader: WebGPU without a GPU, in Chromium and in Node), then the npm packages.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null || missing+=(chromium)
# No `grep -q`: it would exit early and, under pipefail, fail the pipeline with ldconfig's SIGPIPE.
ldconfig -p | grep libvulkan.so.1 >/dev/null || missing+=(libvulkan1)
if ((${#missing[@]} > 0)); then
  echo "installing ${missing[*]}"
  sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y "${missing[@]}"
fi

# onnxruntime-node's postinstall would download GPU providers (and fail offline); we need none.
# npm ci when the lockfile is newer than the installed packages (or nothing is installed).
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  ONNXRUNTIME_NODE_INSTALL=skip npm ci
fi
