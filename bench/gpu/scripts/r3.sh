#!/bin/bash
# replay phase 3 (with .gpucarry/c3): stash chunk 3; on r2's servers, four 200-step runs at once.
source "$(dirname "$0")/common.sh"; source "$(dirname "$0")/replay_common.sh"
exec > >(tee $ART/r3_console.txt) 2>&1
ts "r3 start"; [ -z "$LOCAL" ] && cp .gpucarry/c3/* /tmp/stash/ 2>/dev/null
RTIMEOUT=300 replay pc200x4 http://127.0.0.1:8002 http://127.0.0.1:8004 prefix,noprefix --replay $RP/survey-200-window32k.jsonl.gz --replay-runs 4 -c 4
metrics 8002 pc_after4; metrics 8004 nopc_after4
ts "r3 end"
rpack r3
exit 0
