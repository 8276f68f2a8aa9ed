#!/bin/bash
# phase 1 (with .gpucarry/c1): what the machine is; stash chunk 1 for phase 2
source "$(dirname "$0")/common.sh"
exec > >(tee $ART/g1_console.txt) 2>&1
ts "g1 start"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
$PY -c 'import sys,torch;print(sys.version.split()[0], "torch",torch.__version__,"cuda",torch.version.cuda,torch.cuda.is_available())' 2>&1
nproc; free -g | head -2; df -h /tmp | tail -1
if [ -z "$LOCAL" ]; then mkdir -p /tmp/stash && cp .gpucarry/c1/* /tmp/stash/ && ls -la /tmp/stash; fi
ts "g1 end"
[ -n "$OUT" ] && cp $ART/g1_console.txt $OUT/
exit 0
