#!/bin/bash
# Call 1 (carry .gpucarry/c01 .gpucarry/scripts): the machine's facts; the project as this call
# sent it copied to $R/m (later calls send it again: the suite runs on this copy); c01 stashed
# and the staged work started.
source "$(dirname "$0")/common.sh"
exec > >(tee -a $ART/console.txt) 2>&1
ts "t1 start"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
$PY -c 'import sys,torch,transformers;print(sys.version.split()[0],"torch",torch.__version__,"cuda",torch.cuda.is_available(),"transformers",transformers.__version__)' 2>&1 | tail -n 1
echo "cores $(nproc); $(free -g | awk '/Mem/{print "mem GiB",$2}'); $(df -h /tmp | tail -n 1)"
command -v git bwrap xz curl | tr '\n' ' '; echo
if [ -z "$LOCAL" ]; then
  rm -rf $R/m && mkdir -p $R/m && tar --exclude=./.gpucarry --exclude=./.venv -cf - . | tar -x -C $R/m
else
  rm -rf $R/m && mkdir -p $R/m && (cd $ROOT && git ls-files -z | xargs -0 tar -cf -) | tar -x -C $R/m
fi
echo "project: $(cd $R/m && (git log --oneline -1 2>/dev/null || echo 'no .git')) $(du -sh $R/m | cut -f1)"
bash $S/tc.sh c01
