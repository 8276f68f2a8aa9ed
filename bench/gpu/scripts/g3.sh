#!/bin/bash
# phase 3 (with .gpucarry/c3): a real failure for each diagnosis rule that can be provoked here,
# all at once, each through `brain up` (readiness, diagnosis, the kill after a fatal line); the
# version refusals; a raw 0.99 start beside the two servers of g2 (vLLM's own free-memory view
# against the brain's preflight).
source "$(dirname "$0")/common.sh"
exec > >(tee $ART/g3_console.txt) 2>&1
ts "g3 start"; [ -z "$LOCAL" ] && cp .gpucarry/c3/* /tmp/stash/ 2>/dev/null
[ -f $R/spec.json ] && export SPEC=$(cat $R/spec.json)
MODEL=$(cat $R/model_dummy.txt); LF=; [ -z "$LOCAL" ] && LF=dummy
F=$(profile fail $MODEL 8010 off $LF)
FD=$ART/fail; mkdir -p $FD
# a model directory whose architecture vLLM does not know, and one that needs its own code
if [ -z "$LOCAL" ]; then
  rm -rf $R/badarch $R/remote; cp -r $MODEL $R/badarch; cp -r $MODEL $R/remote
  $PY - $R/badarch/config.json $R/remote/config.json <<'PYEOF'
import json, sys
a = json.load(open(sys.argv[1])); a["architectures"] = ["FooBarForCausalLM"]; json.dump(a, open(sys.argv[1], "w"))
r = json.load(open(sys.argv[2])); r["model_type"] = "marathon_custom"; r["architectures"] = ["MarathonCustomForCausalLM"]
r["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig", "AutoModelForCausalLM": "modeling_custom.CustomModel"}
json.dump(r, open(sys.argv[2], "w"))
PYEOF
  printf 'from transformers import LlamaConfig\nclass CustomConfig(LlamaConfig):\n    model_type = "marathon_custom"\n' > $R/remote/configuration_custom.py
fi
PORT=8020
# case NAME EXPECTED_CAUSE --set ...: one failing start in the background
case_bg() {
  local n=$1 want=$2; shift 2; PORT=$((PORT+1))
  ( T=$(now); timeout 300 brain up $F --set name=$n --set port=$PORT --set gpu_memory_utilization=0.1 "$@" > $FD/$n.txt 2>&1
    echo "### rc=$? wall=$(since $T)" >> $FD/$n.txt; echo "### expected $want" >> $FD/$n.txt ) &
  PIDS="$PIDS $!"
}
PIDS=""
ts "failing starts in parallel"
case_bg badflag unrecognized_arguments --set 'extra_args=[--no-such-flag, "1"]'
case_bg badlen max_model_len_over_model_limit --set max_model_len=65536
case_bg nomodel model_not_found --set model=/tmp/no/such/model
case_bg dtype invalid_cli_choice --set dtype=float7
case_bg kvdtype invalid_cli_choice --set kv_cache_dtype=fp9  # 0.26: argparse; 0.33: CacheConfig
case_bg attn invalid_attention_backend --set attention_backend=FOO
case_bg quant invalid_quantization --set quantization=bogus
case_bg specm invalid_speculative_method --set speculative.method=bogus --set speculative.num_speculative_tokens=2
case_bg reason invalid_reasoning_parser --set reasoning_parser=nope
case_bg arch unknown_architecture --set model=$R/badarch
case_bg remote needs_trust_remote_code --set model=$R/remote
case_bg nogpu no_gpu_visible --set 'env.CUDA_VISIBLE_DEVICES=""'
case_bg flashinfer engine_dead --set attention_backend=FLASHINFER
case_bg kvsmall kv_cache_too_small --set max_model_len=10000000 --set gpu_memory_utilization=0.15 --set env.VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
case_bg parser026 vllm_version_mismatch --set tool_call_parser=qwen3_json
case_bg preload026 vllm_version_mismatch --set preload.enabled=true
case_bg toobig gpu_memory_in_use --set gpu_memory_utilization=0.99
ts "raw vllm serve at 0.99 beside the two servers (vLLM's own free-memory check)"
nvidia-smi --query-gpu=memory.used,memory.free,memory.total --format=csv,noheader > $ART/nvml_before_raw.txt 2>&1
( timeout 150 vllm serve $MODEL --served-model-name smol --port 8099 ${LF:+--load-format $LF} --gpu-memory-utilization 0.99 --max-model-len 4096 > $R/logs/raw_gpumem.log 2>&1 < /dev/null; echo "### exit=$?" >> $R/logs/raw_gpumem.log ) & RAW=$!
wait $PIDS $RAW
for n in $(ls $FD | sed 's/\.txt$//'); do timeout 30 brain down $n > /dev/null 2>&1; done
$PY - $FD $R/logs/raw_gpumem.log $ART/nvml_before_raw.txt > $ART/failures.md <<'PYEOF'
import re, sys
from pathlib import Path
from brain.diagnose import diagnose
fd = Path(sys.argv[1])
print("| case | expected | diagnosed | rc | brain up wall s | evidence |")
print("|---|---|---|---|---|---|")
for f in sorted(fd.glob("*.txt")):
    t = f.read_text(errors="replace")
    want = re.search(r"### expected (\S+)", t)
    got = re.findall(r"\[([a-z_0-9]+)\]\n", t)
    rc = re.search(r"### rc=(\d+) wall=([\d.]+)", t)
    ev = [ln.strip()[2:160] for ln in t.splitlines() if ln.strip().startswith("> ")][:1]
    ok = "ok" if want and got and got[0] == want[1] else "MISMATCH"
    print(f"| {f.stem} | {want[1] if want else '?'} | {got[0] if got else 'none'} ({ok}) | {rc[1] if rc else '?'} | {rc[2] if rc else '?'} | {(ev[0] if ev else '').replace('|', '/')} |")
raw = Path(sys.argv[2]).read_text(errors="replace") if Path(sys.argv[2]).exists() else ""
d = diagnose(raw)
print(f"\nraw vllm serve --gpu-memory-utilization 0.99: {d.cause if d else None}; {d.remedy if d else ''}")
m = re.search(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\)", raw)
print(f"vLLM's view (free/total GiB): {m.groups() if m else None}; NVML before (used, free, total): {Path(sys.argv[3]).read_text().strip()}")
PYEOF
cat $ART/failures.md
ts "g3 end"
pack g3
exit 0
