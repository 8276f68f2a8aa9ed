#!/bin/bash
# The real weights served on $PM through `brain up` (the dummy server down first, once it has
# warmed the compile cache), a smoke test of tool calls through vLLM's hermes parser, then the
# suite and the stock workflow in the background. Run by advance.sh once the model is whole.
source "$(dirname "$0")/common.sh"
ts "serve"
retire_dummy
P=$(qprofile qwen $R/qwen $PM)
T=$(now); timeout 330 brain up $P > $B/up_real.txt 2>&1; rc=$?; echo "rc=$rc wall $(since $T)" >> $B/up_real.txt
fig up_real_s $(since $T); tail -n 3 $B/up_real.txt
if [ $rc != 0 ] || ! curl -sf -m 3 http://127.0.0.1:$PM/health >/dev/null; then
  ts "REAL SERVER NOT UP"; ls -t $MARATHON_HOME/brain/logs/*.log | head -n 1 | xargs -r tail -n 40 | cut -c1-300
  exit 1
fi
mark served
$PY $S/smoke.py $PM 3 > $ART/smoke.txt 2>&1; cut -c1-300 $ART/smoke.txt | head -n 8
bg suite "bash $S/suite.sh"
[ "${WF_RUNS:-2}" -gt 0 ] && bg wf "bash $S/wf.sh"
true
ts "serve done"
