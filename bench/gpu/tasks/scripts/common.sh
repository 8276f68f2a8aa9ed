# Sourced by every device-side script of the task suite on the lent GPU (bench/gpu/tasks).
# R: the device-side root (lives only while the machine is held). LOCAL=1: a rehearsal on this
# machine, `vllm` being the brain's sim, ROOT the project checkout and MINISITE a mini-swe-agent
# site for this Python.
export R=${R:-/tmp/d}
mkdir -p $R/logs $R/art $R/bin $R/state $R/stash $R/done
[ -f $R/t0 ] || date +%s > $R/t0
export T0=$(cat $R/t0)
S=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export S
# the sitting's knobs (README.md), when the carried scripts hold them
[ -f $S/env.sh ] && source $S/env.sh
if [ -n "$LOCAL" ]; then
  export ROOT=${ROOT:?set ROOT to the project checkout}
  export PY=${PY:-$ROOT/.venv/bin/python}
  export PYTHONPATH=$R/m
  export MINISITE=${MINISITE:?set MINISITE to a mini-swe-agent site for this Python}
else
  export PY=${PY:-$(command -v python3)}
  export PYTHONPATH=$R/site:$R/vl:$R/m
  export MINISITE=$R/minisite
fi
export REPO=$R/m PATH=$R/bin:$PATH
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 XDG_STATE_HOME=$R/state MARATHON_HOME=$R/state/marathon
export MARATHON_BENCH_MINI=$R/bin/mini MSWEA_GLOBAL_CONFIG_DIR=$R/state/mini MSWEA_CONFIGURED=1 MSWEA_SILENT_STARTUP=1
export ART=$R/art B=$R/art/brain SUITE=$R/suite
export PM=${PM:-8000} PD=${PD:-8009} PM15=${PM15:-8001}
mkdir -p $B
ts() { echo "[t+$(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S)] $*"; }
now() { date +%s.%N; }
since() { awk "BEGIN{printf \"%.1f\", $(now) - $1}"; }
fig() { printf '%s\t%s\n' "$1" "$2" >> $ART/figures.tsv; ts "figure $1 = $2"; }
gpumem() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; }
done_() { [ -f $R/done/$1 ]; }
# every suite this sitting runs has ended (the second model's only when its weights came)
# every suite started has ended (the 0.5B's chunks may be left behind on a short sitting)
suites_done() {
  done_ served || done_ served15 || return 1
  if done_ served && ! done_ suite; then return 1; fi
  if done_ served15 && ! done_ suite_q15; then return 1; fi
  return 0
}
# retire_dummy: the compile-cache warming server waited for and stopped (once; the first real
# server to come up does it)
retire_dummy() {
  local i; for i in $(seq 1 240); do alive updummy || break; sleep 1; done
  tail -n 2 $B/up_dummy.txt 2>/dev/null
  done_ dummy_down || { timeout 90 brain down qdummy > $B/down_dummy.txt 2>&1; mark dummy_down; }
}
mark() { touch $R/done/$1; }
# qprofile NAME MODEL PORT [LOADFORMAT]: a process-backend brain profile for the model
qprofile() {
  {
    echo "name: $1"; echo "description: ${MODEL_DESC:-Qwen2.5-Coder-0.5B-Instruct} on the lent GPU ($2)"
    echo "backend: process"; echo "model: $2"; echo "served_model_name: qwen"
    echo "host: 127.0.0.1"; echo "port: $3"
    echo "max_model_len: ${MAX_LEN:-32768}"; echo "gpu_memory_utilization: ${GPU_UTIL:-0.3}"
    echo "tool_call_parser: hermes"; echo "enable_auto_tool_choice: true"
    [ -n "$4" ] && echo "load_format: $4"
    echo "extra_args: [--enable-prompt-tokens-details]"
    echo "timeouts: {load_timeout_s: 420, stop_timeout_s: 30}"
  } > $R/prof_$1.yaml
  echo $R/prof_$1.yaml
}
make_bins() {
  if [ -n "$LOCAL" ]; then
    printf '#!/bin/sh\n[ "$1" = --version ] && exec %s -m brain.sim.vllm_entry --version\nshift\nexec %s -m brain.sim.vllm_entry serve "$@"\n' "$PY" "$PY" > $R/bin/vllm
  else
    # as pip writes a console script: the brain reads the version from the metadata (with the
    # main guard: vLLM's spawned EngineCore imports this file again)
    printf '#!%s\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' "$PY" > $R/bin/vllm
  fi
  # brain and pilot as the project's pyproject.toml names their entry points
  local name ep
  for name in brain pilot; do
    ep=$($PY -c "import sys, tomllib; print(tomllib.load(open(sys.argv[1], 'rb'))['project']['scripts'][sys.argv[2]])" $REPO/pyproject.toml $name)
    printf '#!%s\nimport sys\nfrom %s import %s\nsys.exit(%s())\n' "$PY" "${ep%%:*}" "${ep##*:}" "${ep##*:}" > $R/bin/$name
  done
  # mini-swe-agent's `mini`, its own site first (the suite gives it no PYTHONPATH of ours)
  printf '#!%s\nimport sys\nsys.path[:0] = ["%s"]\nfrom minisweagent.run.mini import app\nif __name__ == "__main__":\n    sys.exit(app())\n' "$PY" "$MINISITE" > $R/bin/mini
  chmod +x $R/bin/*
}
# stash DIR: a carried chunk folder's parts into $R/stash
stash() {
  [ -d "$1" ] || { echo "no chunk folder $1 (carry it)"; return 1; }
  cp "$1"/* $R/stash/ && ls -l "$1"/ | tail -n +2 | awk '{print $5, $9}'
}
ready() { $PY $S/chunks.py ready "$1" $R/stash $S/manifest.txt; }
join() { $PY $S/chunks.py join "$1" $R/stash $S/manifest.txt "$2"; }
wait_healthy() { local i; for i in $(seq 1 $2); do curl -sf -m 2 http://127.0.0.1:$1/health >/dev/null && echo ok && return 0; sleep 1; done; echo timeout; return 1; }
# bg NAME CMD...: a command in its own session, outliving this call (log: $R/logs/NAME.log)
bg() { local n=$1; shift; setsid nohup bash -c "$*" > $R/logs/$n.log 2>&1 < /dev/null & echo $! > $R/logs/$n.pid; ts "bg $n pid $(cat $R/logs/$n.pid)"; }
alive() { [ -f $R/logs/$1.pid ] && kill -0 $(cat $R/logs/$1.pid) 2>/dev/null; }
# progress: one line on what is done and how the suite goes
progress() {
  local n=0 ok=0 f
  for f in $R/suite/*.jsonl $R/suite15/*.jsonl; do [ -f "$f" ] || continue
    n=$((n + $(wc -l < "$f"))); ok=$((ok + $(grep -c '"success": true' "$f")))
  done
  local planned=$(( $(cat $R/suite/planned 2>/dev/null || echo 0) + $(cat $R/suite15/planned 2>/dev/null || echo 0) ))
  echo "stages: $(ls $R/done 2>/dev/null | tr '\n' ' ')| tries ended $n of $planned, passed $ok"
}
