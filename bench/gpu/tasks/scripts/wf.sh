#!/bin/bash
# The stock workflow as shipped (workflows/refactor_repo.yaml) on the toolz sdist made a git
# repository, WF_RUNS runs at once against the same server, each at most WF_TIMEOUT seconds.
source "$(dirname "$0")/common.sh"
W=$R/wf${WF_TAG}; PORT=$PM; N=${WF_RUNS:-2}
[ "$WF_TAG" = 15 ] && { PORT=$PM15; N=${WF_RUNS15:-0}; }  # the second model's (env.sh's knobs win over the caller's)
mkdir -p $W && date +%s > $W/t_start
for i in $(seq 1 $N); do
  ( d=$W/r$i && rm -rf $d && mkdir -p $d && cd $d && tar --no-same-owner -xzf $R/sdists/toolz-0.12.1.tar.gz \
    && cd toolz-0.12.1 && git init -q -b main && git add -A \
    && git -c user.email=bench@localhost -c user.name=bench commit -qm "toolz 0.12.1 sdist" \
    && cd $d && timeout ${WF_TIMEOUT:-900} pilot run $REPO/workflows/refactor_repo.yaml \
      --endpoint http://127.0.0.1:$PORT/v1 --param repo=$d/toolz-0.12.1 \
      --param "test_command=python3 -m pytest -q -p no:cacheprovider toolz/tests" > $ART/wf${WF_TAG}_run$i.txt 2>&1
    echo "rc=$? wall $(( $(date +%s) - $(cat $W/t_start) ))s" >> $ART/wf${WF_TAG}_run$i.txt ) &
done
wait; mark wf${WF_TAG}
