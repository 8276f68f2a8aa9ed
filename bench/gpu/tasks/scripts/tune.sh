#!/bin/bash
# The sitting's last call when main holds brain tune (issue 36; the command from its author's
# note): the suite stopped and its server down, then `brain tune` of the 0.5B profile against
# the recorded replays, 4 candidates side by side, its servers started by the tune itself (their
# start costs in its table) and stopped at the end. TUNE_WALL (550 s) bounds its measuring.
source "$(dirname "$0")/common.sh"
exec > >(tee -a $ART/console.txt) 2>&1
ts "tune start"
alive suite && kill -- -$(cat $R/logs/suite.pid) 2>/dev/null
alive wf && kill -- -$(cat $R/logs/wf.pid) 2>/dev/null
timeout 60 brain down qwen 2>&1 | tail -n 1; timeout 30 brain down qdummy > /dev/null 2>&1
gpumem
export MARATHON_HOME=$R/tune-home
cd $REPO
mkdir -p ${OUT:-$R/tuneout}/tune
timeout $(( ${TUNE_WALL:-550} + 40 )) brain tune bench/gpu/profiles/qwen2.5-coder-0.5b-tune.yaml --set model=$R/qwen \
  --replay bench/replays -c 1,4,8 -C off,ngram:2,ngram:3,ngram:4 --requests-per-run 6 --max-tokens 96 \
  --budget-s ${TUNE_BUDGET:-460} --wall-s ${TUNE_WALL:-550} --out ${OUT:-$R/tuneout}/tune 2>&1 | tee ${OUT:-$R/tuneout}/tune.txt
cp bench/gpu/profiles/qwen2.5-coder-0.5b-tune.tuned.yaml ${OUT:-$R/tuneout}/tune/ 2>/dev/null
gpumem; ts "tune end"
exit 0
