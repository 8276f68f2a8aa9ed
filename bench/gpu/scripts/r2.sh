#!/bin/bash
# replay phase 2 (with .gpucarry/c2, after g1.sh stashed c1): assemble; two dummy-weight vLLM
# servers, prefix caching on (8002) and off (8004), both with --enable-prompt-tokens-details;
# brain bench --replay --compare of the shipped recordings, one run at a time. Both stay up for r3.
source "$(dirname "$0")/common.sh"; source "$(dirname "$0")/replay_common.sh"
exec > >(tee $ART/r2_console.txt) 2>&1
ts "r2 start"
assemble; make_bins
if [ -z "$LOCAL" ]; then
  $PY -c "import numba" 2>/dev/null || export SPEC='{"method":"ngram_gpu","num_speculative_tokens":2,"prompt_lookup_max":4,"prompt_lookup_min":2}'
  rm -rf $R/smol64k && cp -r $R/smol $R/smol64k && long_config $R/smol64k; MODEL=$R/smol64k; LF=dummy
else
  MODEL=sim/smol; LF=""
fi
echo "$SPEC" > $R/spec.json
ON=$(rprofile pc $MODEL 8002 off on $LF); OFF=$(rprofile nopc $MODEL 8004 off off $LF)
cat $ON; brain up $ON --dry-run 2>&1 | tail -3; brain up $OFF --dry-run 2>&1 | tail -3
up $ON up_pc; up $OFF up_nopc
metrics 8002 pc_before; metrics 8004 nopc_before
replay pc200 http://127.0.0.1:8002 http://127.0.0.1:8004 prefix,noprefix --replay $RP/survey-200-window32k.jsonl.gz -c 1
replay pc60 http://127.0.0.1:8002 http://127.0.0.1:8004 prefix,noprefix --replay $RP/survey-60-window8k.jsonl.gz --replay $RP/refactor-demo-14.jsonl.gz -c 1
metrics 8002 pc_after2; metrics 8004 nopc_after2
RNEED=100 RTIMEOUT=200 replay pc60x16 http://127.0.0.1:8002 http://127.0.0.1:8004 prefix,noprefix --replay $RP/survey-60-window8k.jsonl.gz --replay-runs 16 -c 4,16
metrics 8002 pc_after3; metrics 8004 nopc_after3
brain ps 2>&1 | tee $B/ps_r2.txt; gpumem
ts "r2 end"
rpack r2
exit 0
