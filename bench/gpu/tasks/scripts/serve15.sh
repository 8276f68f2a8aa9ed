#!/bin/bash
# The second model, Qwen2.5-Coder-1.5B-Instruct, served on $PM15 beside the first (its own
# brain profile, the same flags), a smoke test, then its suite (suite.sh with SUITE_KIND=q15)
# and the stock workflow against it. Run by advance.sh once its weights are converted.
source "$(dirname "$0")/common.sh"
ts "serve15"
retire_dummy
P=$(MODEL_DESC=Qwen2.5-Coder-1.5B-Instruct qprofile qwen15 $R/qwen15 $PM15)
T=$(now); timeout 330 brain up $P > $B/up_real15.txt 2>&1; rc=$?; echo "rc=$rc wall $(since $T)" >> $B/up_real15.txt
fig up_real15_s $(since $T); tail -n 3 $B/up_real15.txt
if [ $rc != 0 ] || ! curl -sf -m 3 http://127.0.0.1:$PM15/health >/dev/null; then
  ts "1.5B SERVER NOT UP"; tail -n 40 $MARATHON_HOME/brain/logs/qwen15.log 2>/dev/null | cut -c1-300
  exit 1
fi
mark served15
$PY $S/smoke.py $PM15 2 > $ART/smoke15.txt 2>&1; cut -c1-300 $ART/smoke15.txt | head -n 8
SUITE_KIND=q15 bg suite15 "SUITE_KIND=q15 bash $S/suite.sh"
[ "${WF_RUNS15:-0}" -gt 0 ] && bg wf15 "WF_TAG=15 bash $S/wf.sh"
ts "serve15 done"
