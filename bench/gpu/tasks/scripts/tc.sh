#!/bin/bash
# A carrying call (tc.sh cNN; carry .gpucarry/cNN .gpucarry/scripts): the chunk stashed, the
# staged work (advance.sh) started in the background; what is done so far.
source "$(dirname "$0")/common.sh"
exec > >(tee -a $ART/console.txt) 2>&1
ts "tc $1 start"
stash .gpucarry/$1 || exit 1
bg advance_$1 "bash $S/advance.sh"
sleep ${SETTLE:-2}
for f in $(ls -tr $R/logs/advance_*.log 2>/dev/null | tail -n 3); do tail -n 4 $f | cut -c1-240; done
tail -n 2 $B/up_dummy.txt 2>/dev/null | cut -c1-200
if grep -q '^rc=[1-9]' $B/up_dummy.txt 2>/dev/null; then tail -n 30 $MARATHON_HOME/brain/logs/qdummy.log | cut -c1-300; fi
gpumem; ts "tc $1 end: $(progress)"
exit 0
