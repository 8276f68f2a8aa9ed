#!/bin/bash
# two GPUs, phase 1 (after g1.sh, with .gpucarry/c2): tensor parallel 2. A dummy-weights model
# whose heads divide by 2 (SmolLM2-135M's config has 9 heads and 3 KV heads: copied with
# hidden 512, 8 heads, 2 KV heads, head_dim 64); brain up --watch on GPUs 0,1 with readiness,
# the timeline and NCCL's init from the log (NCCL_DEBUG=INFO); status; bench c=1/4/16; kill -9
# of the rank-1 worker and the supervisor's restart; brain down and both GPUs' memory released.
source "$(dirname "$0")/common.sh"
exec > >(tee $ART/x2_console.txt) 2>&1
ts "x2 start"; gpumem | tee $ART/gpumem_x2_start.txt
assemble; make_bins
[ -f $R/spec.json ] && export SPEC=$(cat $R/spec.json)
if [ -z "$LOCAL" ]; then
  rm -rf $R/smol_tp2 && cp -r $R/smol $R/smol_tp2
  $PY - $R/smol_tp2/config.json <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p))
c.update(hidden_size=512, num_attention_heads=8, num_key_value_heads=2, head_dim=64)
json.dump(c, open(p, "w"), indent=2)
print("TP-2 config:", {k: c[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size")})
PY
  MODEL=$R/smol_tp2; LF=dummy
else
  MODEL=sim/smol; LF=""
fi
P=$(profile smoltp2 $MODEL 8010 off $LF)
{ echo "tensor_parallel_size: 2"; echo "gpus: [0, 1]"; echo "env: {NCCL_DEBUG: INFO}"; } >> $P
cat $P
brain up $P --dry-run > $B/x2_dryrun.txt 2>&1; echo "rc=$?" >> $B/x2_dryrun.txt; cat $B/x2_dryrun.txt
grep -q "NCCL_NVLS_ENABLE=0" $B/x2_dryrun.txt && grep -q "CUDA_VISIBLE_DEVICES=0,1" $B/x2_dryrun.txt && grep -q -- "--tensor-parallel-size 2" $B/x2_dryrun.txt; fig x2_dryrun_nvls_off_tp2 $([ $? = 0 ] && echo yes || echo NO)
ts "brain up TP-2 --watch"; T=$(now)
setsid nohup brain up $P --watch --poll-interval 2 > $B/x2_watch.txt 2>&1 < /dev/null & WATCH=$!
for i in $(seq 1 480); do grep -q "ready" $B/x2_watch.txt 2>/dev/null && curl -sf -m 2 http://127.0.0.1:8010/health >/dev/null && break; kill -0 $WATCH 2>/dev/null || break; sleep 1; done
fig x2_tp2_ready_wall_s $(since $T); cat $B/x2_watch.txt; gpumem | tee $ART/gpumem_x2_tp2_up.txt
SPID=$(server_pid smoltp2); echo "server $SPID: $(descendants ${SPID:-1} | wc -w) descendants"
[ -n "$SPID" ] && [ -z "$LOCAL" ] && tr '\0' '\n' < /proc/$(engine_of $SPID)/environ | grep -E '^(NCCL_NVLS_ENABLE|CUDA_VISIBLE_DEVICES)=' | tee $B/x2_engine_env.txt
LOG=$(ls -t $MARATHON_HOME/brain/logs/smoltp2*.log 2>/dev/null | head -1); echo "log $LOG"
grep -E "NCCL INFO (Bootstrap|comm 0x|Init COMPLETE|NVLS)|vLLM is using nccl|pynccl|world_size=2|custom_all_reduce|Custom allreduce" $LOG 2>/dev/null | head -40 > $B/x2_nccl.txt; cat $B/x2_nccl.txt
grep -q "NVLS multicast support is available" $B/x2_nccl.txt && ts "WARNING: NCCL reports NVLS in use"
brain ps > $B/x2_ps.txt 2>&1; cat $B/x2_ps.txt
ts "status under load (c=16), bench c=1/4/16"
( sleep 25; brain status smoltp2 --interval 3 > $B/x2_status_busy.txt 2>&1 ) & ST=$!
timeout 300 brain bench http://127.0.0.1:8010 -c 1,4,16 --input-len 256 --output-len 128 -q --json $B/x2_bench.json --markdown $B/x2_bench.md > $B/x2_bench.txt 2>&1; echo "rc=$?" >> $B/x2_bench.txt
wait $ST; tail -20 $B/x2_bench.txt; cat $B/x2_status_busy.txt
brain status http://127.0.0.1:8010 --interval 2 > $B/x2_status_after.txt 2>&1; cat $B/x2_status_after.txt
ts "kill -9 of the rank-1 worker under --watch"
W=$(worker_of ${SPID:-1}); echo "server $SPID worker $W: $(tr '\0' ' ' < /proc/$W/cmdline 2>/dev/null | head -c 120)" | tee $B/x2_kill.txt
KT=$(now); kill -9 $W; ts "killed $W" | tee -a $B/x2_kill.txt
BACK=""
for i in $(seq 1 480); do
  H=$(curl -s -o /dev/null -w '%{http_code}' -m 2 http://127.0.0.1:8010/health); echo "t+$(since $KT) health=$H" >> $B/x2_kill.txt
  if [ "$H" = 200 ] && [ -n "$(server_pid smoltp2)" ] && [ "$(server_pid smoltp2)" != "$SPID" ]; then BACK=$(since $KT); break; fi
  sleep 1
done
fig x2_kill_worker_to_healthy_s ${BACK:-none}
grep -m3 -E "health=(000|503)" $B/x2_kill.txt; tail -2 $B/x2_kill.txt; tail -25 $B/x2_watch.txt
timeout 60 brain bench http://127.0.0.1:8010 -c 4 -n 16 --input-len 128 --output-len 32 -q > $B/x2_bench_after_restart.txt 2>&1; tail -6 $B/x2_bench_after_restart.txt
ts "brain down"; T=$(now); timeout 120 brain down smoltp2 > $B/x2_down.txt 2>&1; echo "rc=$?" >> $B/x2_down.txt; cat $B/x2_down.txt
fig x2_down_wall_s $(since $T); sleep 2
kill -0 $WATCH 2>/dev/null && echo "supervisor $WATCH still alive" | tee -a $B/x2_down.txt
fig x2_gpus_used_mib_after_down $(gpus_used); gpumem | tee $ART/gpumem_x2_down.txt
ts "x2 end"
pack x2
exit 0
