#!/bin/bash
# two GPUs, phase 2 (after x2.sh; no carry beyond the scripts): a two-replica fleet, one server
# per GPU (brain up --replicas 2 --gpus 0,1 --watch), `pilot run --parallel 8` over it
# (model: {fleet: duo}), kill -9 of replica 1 mid-run: its runs move to replica 0 with nothing
# lost, the supervisor brings it back, and a second batch gets runs on it again; brain down and
# both GPUs' memory released. SPLIT=0,0 runs the same on one card split in two (each replica at
# half the profile's gpu_memory_utilization; the one-GPU machine can run it).
source "$(dirname "$0")/common.sh"
GPUS=${SPLIT:-0,1}; NAME=duo; [ -n "$SPLIT" ] && NAME=half
exec > >(tee $ART/x2fleet_${NAME}_console.txt) 2>&1
ts "x2fleet start (gpus $GPUS)"; gpumem
assemble; make_bins
MODEL=$(cat $R/model_dummy.txt 2>/dev/null); [ -n "$MODEL" ] || MODEL=$([ -n "$LOCAL" ] && echo sim/smol || echo $R/smol)
LF=; [ -z "$LOCAL" ] && LF=dummy
P=$(profile smolfleet $MODEL 8030 off $LF)
# the sim answers in milliseconds: slow it (a step ~ a second) so the kill lands mid-run
# and script it: six read_file steps of ~40 tokens, then finish (the demo policy finishes at once)
if [ -n "$LOCAL" ]; then
  echo "timing: {ttft: 0.2, itl: 0.01}" > $R/simslow.yaml
  $PY - $R/simscript.yaml <<'PY'
import sys, yaml
say = "Reading the repository file by file before summing it up. " * 4
turns = [{"content": say, "tool_calls": [{"name": "read_file", "arguments": {"path": f"notes/n{i}.txt"}}]} for i in range(6)]
turns.append({"tool_calls": [{"name": "finish", "arguments": {"summary": "a tiny repo"}}]})
yaml.safe_dump({"conversations": [{"key": "List the files with list_dir", "turns": turns}]}, open(sys.argv[1], "w"))
PY
  echo "env: {BRAIN_SIM_CONFIG: $R/simslow.yaml, BRAIN_SIM_POLICY: 'script:$R/simscript.yaml'}" >> $P
fi
cat $P
brain up $P --gpus $GPUS --set name=$NAME --dry-run > $B/${NAME}_dryrun.txt 2>&1; echo "rc=$?" >> $B/${NAME}_dryrun.txt; cat $B/${NAME}_dryrun.txt
fig ${NAME}_dryrun_nvls_off $(grep -c "NCCL_NVLS_ENABLE=0" $B/${NAME}_dryrun.txt)
ts "brain up --gpus $GPUS --watch"; T=$(now)
setsid nohup brain up $P --gpus $GPUS --set name=$NAME --watch --poll-interval 2 > $B/${NAME}_watch.txt 2>&1 < /dev/null & WATCH=$!
A=$(wait_healthy 8030 480); B1=$(wait_healthy 8031 480); fig ${NAME}_both_ready_wall_s $(since $T)
echo "r0 $A r1 $B1"; cat $B/${NAME}_watch.txt; brain ps > $B/${NAME}_ps.txt 2>&1; cat $B/${NAME}_ps.txt
brain status $NAME > $B/${NAME}_status.txt 2>&1; cat $B/${NAME}_status.txt; gpumem | tee $ART/gpumem_${NAME}_up.txt
sed -e "s|  endpoint: http://127.0.0.1:8000/v1|  fleet: $NAME|" -e "s|name: smoke-restart|name: fleet-$NAME|" $S/wf_long.yaml > $R/wf_$NAME.yaml
mk_matrix() { local f=$1 from=$2 to=$3 i; : > $f; for i in $(seq $from $to); do workspace $R/ws_${NAME}_$i; mkdir $R/ws_${NAME}_$i/notes; for n in 0 1 2 3 4 5; do echo "note $n" > $R/ws_${NAME}_$i/notes/n$n.txt; done; echo "- {repo: $R/ws_${NAME}_$i}" >> $f; done; }
mk_matrix $R/m1_$NAME.yaml 1 8; mk_matrix $R/m2_$NAME.yaml 9 12
ts "pilot run --parallel 8 over the fleet"; T=$(now)
( timeout 500 pilot run $R/wf_$NAME.yaml --matrix $R/m1_$NAME.yaml --parallel 8 --json > $B/${NAME}_pilot1.jsonl 2> $B/${NAME}_pilot1.err; echo "rc=$?" >> $B/${NAME}_pilot1.err ) & PR=$!
for i in $(seq 1 300); do $PY $S/runs.py | grep -q 'running .*8031x' && break; kill -0 $PR 2>/dev/null || break; sleep 0.5; done
$PY $S/runs.py | head -8 | tee $B/${NAME}_runs_before_kill.txt
R1=$(server_pid $NAME-r1); PG=$(ps -o pgid= -p ${R1:-1} | tr -d ' ')
ts "kill -9 of replica 1 (server $R1, process group $PG) mid-run" | tee $B/${NAME}_kill.txt
KT=$(now); [ -n "$PG" ] && kill -9 -- -$PG
BACK=""
for i in $(seq 1 480); do
  N=$(server_pid $NAME-r1); H=$(curl -s -o /dev/null -w '%{http_code}' -m 2 http://127.0.0.1:8031/health); echo "t+$(since $KT) health=$H pid=$N" >> $B/${NAME}_kill.txt
  if [ "$H" = 200 ] && [ -n "$N" ] && [ "$N" != "$R1" ]; then BACK=$(since $KT); break; fi
  sleep 1
done
fig ${NAME}_replica_kill_to_healthy_s ${BACK:-none}
wait $PR; fig ${NAME}_pilot1_wall_s $(since $T); tail -5 $B/${NAME}_pilot1.err
$PY $S/runs.py | head -8 | tee $B/${NAME}_runs_after_kill.txt  # newest first: this batch
fig ${NAME}_pilot1_succeeded "$(grep -c succeeded $B/${NAME}_runs_after_kill.txt)/8"
fig ${NAME}_runs_moved_8031_to_8030 $(grep -c '8031x[0-9]*>8030' $B/${NAME}_runs_after_kill.txt)
for w in $R/ws_${NAME}_*; do git -C $w log --oneline 2>/dev/null | head -1; done > $B/${NAME}_workspaces.txt
ts "the replica is back: a second batch of 4"; T=$(now)
timeout 300 pilot run $R/wf_$NAME.yaml --matrix $R/m2_$NAME.yaml --parallel 4 --json > $B/${NAME}_pilot2.jsonl 2> $B/${NAME}_pilot2.err; echo "rc=$?" >> $B/${NAME}_pilot2.err
$PY $S/runs.py | head -12 | tee $B/${NAME}_runs_end.txt
fig ${NAME}_all_succeeded "$(grep -c succeeded $B/${NAME}_runs_end.txt)/12"
fig ${NAME}_batch2_runs_on_8031 $(head -4 $B/${NAME}_runs_end.txt | grep -c ' 8031x')
tail -20 $B/${NAME}_watch.txt
ts "brain down $NAME"; T=$(now); timeout 180 brain down $NAME > $B/${NAME}_down.txt 2>&1; echo "rc=$?" >> $B/${NAME}_down.txt; cat $B/${NAME}_down.txt
fig ${NAME}_down_wall_s $(since $T); sleep 2
kill -0 $WATCH 2>/dev/null && echo "fleet supervisor $WATCH still alive" | tee -a $B/${NAME}_down.txt
fig ${NAME}_gpus_used_mib_after_down $(gpus_used); gpumem | tee $ART/gpumem_${NAME}_down.txt
ts "x2fleet end"
pack x2fleet_$NAME
exit 0
