#!/bin/bash
# phase 2 (with .gpucarry/c2): assemble vLLM + wheels + the project; doctor; brain up (process
# backend, dummy weights, ngram on) from a cold compile cache with readiness and the timeline;
# status under load and after it; bench; brain down and GPU memory; brain up again warm, and a
# second server with speculation off; bench --compare on vs off. Both servers stay up for g3.
source "$(dirname "$0")/common.sh"
exec > >(tee $ART/g2_console.txt) 2>&1
ts "g2 start"
if [ -z "$LOCAL" ]; then
  cp .gpucarry/c2/* /tmp/stash/
  mkdir -p $R/vl $R/site $R/stage
  ts "untar vllm"; cat /tmp/stash/vllm.part* | xz -d | tar -x -C $R/vl || { echo "VLLM UNTAR FAILED"; exit 1; }
  tar -xf /tmp/stash/rest.tar -C $R/stage
  ts "pip install"; $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $R/site $R/stage/wheels/*.whl 2>&1 | tail -3
  mkdir -p $R/m && tar -xJf $R/stage/main.tar.xz -C $R/m
  rm -rf $R/smol && cp -r $R/stage/smol $R/smol && cp $R/stage/hermes.jinja $R/smol/chat_template.jinja
  ts "assembled"; du -sh $R/vl $R/site $R/m
  $PY -c "import numba" 2>/dev/null || { echo "numba import failed: ngram_gpu"; export SPEC='{"method":"ngram_gpu","num_speculative_tokens":2,"prompt_lookup_max":4,"prompt_lookup_min":2}'; }
  MODEL=$R/smol; LF=dummy
else
  MODEL=sim/smol; LF=""
fi
echo "$SPEC" > $R/spec.json; echo "$MODEL" > $R/model_dummy.txt
make_bins
brain --version; T=$(now); V=$(vllm --version 2>/dev/null | tail -1); echo "vllm --version: $V ($(since $T) s)" | tee $ART/vllm_version.txt
A=$(profile smoldummy $MODEL 8002 on $LF); OFF=$(profile smoloff $MODEL 8004 off $LF)
cat $A
ts "doctor"; brain doctor $A > $B/doctor.txt 2>&1; echo "rc=$?" >> $B/doctor.txt; cat $B/doctor.txt
brain doctor $A --set max_num_queued_reqs=64 --set preload.enabled=true > $B/doctor_version.txt 2>&1; echo "rc=$?" >> $B/doctor_version.txt; cat $B/doctor_version.txt
brain up $A --dry-run > $B/dryrun.txt 2>&1; cat $B/dryrun.txt
ts "brain up smoldummy (cold compile cache)"; G0=$(gpu_used_mib); T=$(now)
timeout 420 brain up $A > $B/up_cold.txt 2>&1; echo "### rc=$?" >> $B/up_cold.txt
fig brain_up_cold_wall_s $(since $T); cat $B/up_cold.txt
brain ps > $B/ps1.txt 2>&1; cat $B/ps1.txt
ts "status under load, then after it"
( timeout 120 brain bench http://127.0.0.1:8002 -c 4 -n 48 --input-len 256 --output-len 128 -q --json $B/bench_load.json > $B/bench_load.txt 2>&1 ) & BB=$!
sleep 6; brain status smoldummy --interval 3 > $B/status_busy.txt 2>&1; echo "rc=$?" >> $B/status_busy.txt; cat $B/status_busy.txt
wait $BB; tail -8 $B/bench_load.txt
brain status http://127.0.0.1:8002/v1 --interval 2 > $B/status_url_after.txt 2>&1; echo "rc=$?" >> $B/status_url_after.txt; cat $B/status_url_after.txt
brain logs smoldummy --tail 40 > $B/logs_tail.txt 2>&1
ts "brain down smoldummy"; T=$(now); timeout 120 brain down smoldummy > $B/down1.txt 2>&1; echo "rc=$?" >> $B/down1.txt
fig brain_down_wall_s $(since $T); cat $B/down1.txt; sleep 1; gpumem | tee $ART/gpumem_after_down1.txt
fig gpu_used_mib_before_up $G0; fig gpu_used_mib_after_down $(gpu_used_mib)
ts "brain up again (warm compile cache) and a speculation-off server beside it"
T=$(now); ( timeout 420 brain up $A > $B/up_warm.txt 2>&1; echo "### rc=$?" >> $B/up_warm.txt; echo "wall $(since $T)" >> $B/up_warm.txt ) & U1=$!
sleep 2; T2=$(now); ( timeout 420 brain up $OFF > $B/up_off.txt 2>&1; echo "### rc=$?" >> $B/up_off.txt; echo "wall $(since $T2)" >> $B/up_off.txt ) & U2=$!
wait $U1 $U2; cat $B/up_warm.txt $B/up_off.txt
fig brain_up_warm_wall_s $(grep '^wall' $B/up_warm.txt | cut -d' ' -f2)
ts "bench --compare: ngram on (8002) vs off (8004), dummy weights"
timeout 200 brain bench http://127.0.0.1:8002 --compare http://127.0.0.1:8004 --labels ngram,off -c 1,4 --input-len 256 --output-len 64 -q --json $B/bench_compare_dummy.json --markdown $B/bench_compare_dummy.md > $B/bench_compare_dummy.txt 2>&1; echo "rc=$?" >> $B/bench_compare_dummy.txt; tail -30 $B/bench_compare_dummy.txt
brain ps > $B/ps2.txt 2>&1; cat $B/ps2.txt; gpumem | tee $ART/gpumem_two_up.txt
ts "g2 end"
pack g2
exit 0
