#!/bin/bash
# What has ended so far, summarized and packed into $OUT (at most 8 files, 16 MB each).
source "$(dirname "$0")/common.sh"
cd $REPO
cat $R/suite/*.jsonl $R/suite15/*.jsonl > $ART/results.jsonl 2>/dev/null
if [ -s $ART/results.jsonl ]; then
  $PY -m bench.tasks.run --report $(ls $R/suite/*.jsonl $R/suite15/*.jsonl 2>/dev/null) --summary $ART/summary.md --plot $ART/tasks.png > $ART/report.txt 2>&1
  grep -A14 -i 'pass@1' $ART/summary.md | head -n 24
fi
for d in $R/suite $R/suite15; do [ -f $d/t_start ] && echo "$(basename $d) wall: $(( $(cat $d/t_end 2>/dev/null || date +%s) - $(cat $d/t_start) )) s"; done | tee $ART/suite_wall.txt
for f in $ART/wf*_run*.txt; do [ -f $f ] && { echo "== $f"; tail -n 4 $f | cut -c1-240; }; done
if [ -f $MARATHON_HOME/marathon.db ]; then
  pilot runs > $ART/wf_runs.txt 2>&1
  for id in $(pilot runs --json 2>/dev/null | $PY -c "import sys,json; [print(json.loads(l)['id']) for l in sys.stdin if l.strip()]" 2>/dev/null | head -n 8); do
    pilot show $id > $ART/wf_show_$id.txt 2>&1; done
fi
for L in $MARATHON_HOME/brain/logs/qwen.log $MARATHON_HOME/brain/logs/qwen15.log; do [ -f $L ] || continue
{ echo "== $(basename $L)"; echo "server log: $(wc -l < $L 2>/dev/null) lines; chat completions $(grep -c 'POST /v1/chat/completions' $L 2>/dev/null); non-200 $(grep 'POST /v1/chat/completions' $L 2>/dev/null | grep -vc ' 200 ')"
  grep -E ' (ERROR|CRITICAL) |Traceback' $L 2>/dev/null | cut -c1-200 | sort | uniq -c | sort -rn | head -n 10; }; done > $ART/server_summary.txt
cat $ART/server_summary.txt | head -n 6
[ -n "$OUT" ] || exit 0
cp $ART/summary.md $ART/tasks.png $ART/results.jsonl $OUT/ 2>/dev/null
mkdir -p $R/logs_brain && cp -r $MARATHON_HOME/brain/logs/. $R/logs_brain/ 2>/dev/null
tar -czf $OUT/art.tgz -C $R art logs logs_brain $(cd $R && ls -d suite*/*.log suite*/planned 2>/dev/null) 2>/dev/null
tar -czf $R/traces.tgz -C $R --exclude='*.db' --exclude='*.db-wal' --exclude='*.db-shm' $(cd $R && ls -d suite*/keep_* 2>/dev/null) 2>/dev/null
if [ $(stat -c %s $R/traces.tgz) -le 15000000 ]; then cp $R/traces.tgz $OUT/
else split -b 15000000 -d -a 1 $R/traces.tgz $OUT/traces.tgz.; ls $OUT/traces.tgz.* | tail -n +4 | xargs -r rm; fi
ls -la $OUT | tail -n +2 | awk '{print $5, $9}'
