#!/bin/bash
# A waiting call (twait.sh; carry .gpucarry/scripts): progress every 20 s until the suite ends or
# WAIT_S has passed; then the summary (bench.tasks.report) of what has ended, and everything
# small packed into $OUT (summary.md, tasks.png, results.jsonl, art.tgz, traces*.tgz).
source "$(dirname "$0")/common.sh"
exec > >(tee -a $ART/console.txt) 2>&1
ts "twait start"
DEAD=$(( $(date +%s) + ${WAIT_S:-420} ))
while ! suites_done && [ $(date +%s) -lt $DEAD ]; do
  if ! done_ served; then
    last=$(ls -tr $R/logs/advance_*.log | tail -n 1); adv=$(basename $last .log)
    if alive $adv; then tail -n 2 $last | cut -c1-200; else tail -n 40 $last | cut -c1-300; ts "the staged work has stopped"; break; fi
  fi
  ts "$(progress)"; sleep 20
done
if [ -n "$STOP" ]; then
  for j in suite suite15 wf wf15; do alive $j && kill -- -$(cat $R/logs/$j.pid) 2>/dev/null; done; ts "stopped"
fi
bash $S/summarize.sh
ts "twait end: $(progress)"
exit 0
