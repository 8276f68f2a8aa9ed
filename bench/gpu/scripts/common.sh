# Sourced by every phase. R: the device-side root (lives only while the machine is held).
# LOCAL=1: a rehearsal on this machine, `vllm` being the brain's sim and the project the checkout.
export R=${R:-/tmp/d}
mkdir -p $R/logs $R/art $R/bin $R/state
[ -f $R/t0 ] || date +%s > $R/t0
export T0=$(cat $R/t0)
S=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "$LOCAL" ]; then
  ROOT=${ROOT:-$(cd "$S/../../.." && pwd)}; [ -f "$ROOT/pyproject.toml" ] || ROOT=$(git rev-parse --show-toplevel)
  export PY=${PY:-$ROOT/.venv/bin/python}
  export PYTHONPATH=$ROOT
else
  export PY=${PY:-$(command -v python3)}
  export PYTHONPATH=$R/site:$R/vl:$R/m
fi
export PATH=$R/bin:$PATH
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
export XDG_STATE_HOME=$R/state MARATHON_HOME=$R/state/marathon
export ART=$R/art B=$R/art/brain
mkdir -p $B
export SPEC='{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":4,"prompt_lookup_min":2}'
ts() { echo "[t+$(( $(date +%s) - T0 ))s $(date +%H:%M:%S)] $*"; }
now() { date +%s.%N; }
since() { awk "BEGIN{printf \"%.1f\", $(now) - $1}"; }
# fig NAME VALUE: one figure for the report (art/figures.tsv)
fig() { printf '%s\t%s\n' "$1" "$2" >> $ART/figures.tsv; ts "figure $1 = $2"; }
descendants() { local c; for c in $(pgrep -P $1 2>/dev/null); do echo $c; descendants $c; done; }
gpumem() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null; }
gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ' || echo NA; }
# engine_of PID: the EngineCore process under a vLLM API server (or the server itself for the sim)
engine_of() { local p e=""; for p in $(descendants $1); do tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q EngineCore && e=$p; grep -q EngineCor /proc/$p/comm 2>/dev/null && e=$p; done; echo ${e:-$1}; }
server_pid() { $PY - "$1" <<'PYEOF'
import sys
from brain.state import Registry
r = Registry().get(sys.argv[1]); print(r.handle.get("ref") if r else "")
PYEOF
}
# profile NAME MODEL PORT SPECULATION(on|off) [LOADFORMAT]: a brain profile for the process backend
profile() {
  local method; method=$(echo "$SPEC" | sed 's/.*"method":"\([^"]*\)".*/\1/')
  {
    echo "name: $1"; echo "description: the GPU proof on the lent H200 ($2)"; echo "backend: process"
    echo "model: $2"; echo "served_model_name: smol"; echo "host: 127.0.0.1"; echo "port: $3"
    echo "max_model_len: 4096"; echo "gpu_memory_utilization: 0.25"
    echo "tool_call_parser: hermes"; echo "enable_auto_tool_choice: true"
    [ -n "$5" ] && echo "load_format: $5"
    if [ "$4" = on ]; then
      echo "speculative:"; echo "  method: $method"; echo "  num_speculative_tokens: 2"
      echo "  extra: {prompt_lookup_max: 4, prompt_lookup_min: 2}"
    fi
    echo "timeouts: {load_timeout_s: 420, stop_timeout_s: 30}"
  } > $R/prof_$1.yaml
  echo $R/prof_$1.yaml
}
# a git workspace for pilot runs
workspace() { rm -rf $1; mkdir -p $1; printf '# sample\nA tiny repo.\n' > $1/README.md; printf 'print(1)\n' > $1/main.py
  (cd $1 && git init -q && git add -A && git -c user.email=a@b -c user.name=t commit -qm init); }
pack() { # pack NAME: this phase's artefacts into $OUT
  [ -n "$OUT" ] || return 0
  tar -czf $OUT/$1.tgz -C $R art logs state/marathon/brain/logs state/marathon/marathon.db 2>/dev/null
  ls -la $OUT
}
# the bin/ wrappers: vllm (real, or the sim answering as vLLM), brain, pilot
make_bins() {
  if [ -n "$LOCAL" ]; then
    printf '#!/bin/sh\n[ "$1" = --version ] && exec %s -m brain.sim.vllm_entry --version\nshift\nexec %s -m brain.sim.vllm_entry serve "$@"\n' "$PY" "$PY" > $R/bin/vllm
  else
    printf '#!/bin/sh\nexec %s -m vllm.entrypoints.cli.main "$@"\n' "$PY" > $R/bin/vllm
  fi
  printf '#!%s\nimport sys\nfrom brain.cli import app\nsys.exit(app())\n' "$PY" > $R/bin/brain
  printf '#!%s\nimport sys\nfrom pilot.front.cli import app\nsys.exit(app())\n' "$PY" > $R/bin/pilot
  chmod +x $R/bin/*
}
# assemble: vLLM + wheels + the project + the model config from the stash (c1 from g1, c2 here)
assemble() {
  [ -n "$LOCAL" ] && return 0
  [ -f $R/assembled ] && return 0
  cp .gpucarry/c2/* /tmp/stash/
  mkdir -p $R/vl $R/site $R/stage
  ts "untar vllm"; cat /tmp/stash/vllm.part* | xz -d | tar -x -C $R/vl || { echo "VLLM UNTAR FAILED"; exit 1; }
  tar -xf /tmp/stash/rest.tar -C $R/stage
  ts "pip install"; $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $R/site $R/stage/wheels/*.whl 2>&1 | tail -3
  mkdir -p $R/m && tar -xJf $R/stage/main.tar.xz -C $R/m
  rm -rf $R/smol && cp -r $R/stage/smol $R/smol && cp $R/stage/hermes.jinja $R/smol/chat_template.jinja
  touch $R/assembled; ts "assembled"
}
# gpus_used: every GPU's used memory (MiB), comma-separated
gpus_used() { local u; u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | paste -sd, -); echo ${u:-NA}; }
# worker_of PID: the TP rank-1 worker under a vLLM server (else the engine, for the sim)
worker_of() { local p w=""; for p in $(descendants $1); do tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q 'Worker.*TP1\|TP1.*Worker' && w=$p; grep -q 'Worker_TP1\|WorkerTP1' /proc/$p/comm 2>/dev/null && w=$p; done; echo ${w:-$(engine_of $1)}; }
# wait_healthy PORT SECONDS: until /health answers 200 (prints ok or timeout)
wait_healthy() { local i; for i in $(seq 1 $2); do curl -sf -m 2 http://127.0.0.1:$1/health >/dev/null && echo ok && return 0; sleep 1; done; echo timeout; }
