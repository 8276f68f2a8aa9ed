#!/bin/bash
# The task suite (bench/tasks) against the served model, every agent on the same server, tasks,
# step and token budget: Marathon as shipped (its own call mode), the plain loop, mini-swe-agent
# (its default config); and, when the pilot can pin a call mode (model.tool_calls), Marathon
# with forced calls beside them. TRIES tries each, try 1 of everything first, so a sitting cut
# short still compares the agents on the same tasks. Results: $SUITE/<group>.jsonl.
source "$(dirname "$0")/common.sh"
if [ "$SUITE_KIND" = q15 ]; then  # the second model's suite: its own knobs (env.sh), port and folder
  LABEL=q15 PM=$PM15 SUITE=$R/suite15 TASKS=${TASKS15-} TRIES=${TRIES15:-10} AGENTS=${AGENTS15:-marathon,mini}
  PAR=${PAR15:-30} PAR_FORCED=${PAR_FORCED15:-10} FORCED_TRIES=${FORCED_TRIES15:-3} TASKS2=
  VARIANT_SET=${VARIANT_SET15-} VARIANT_NAME=${VARIANT_NAME15-} VARIANT_TRIES=${VARIANT_TRIES15:-3}
fi
cd $REPO
mkdir -p $SUITE
EP=http://127.0.0.1:$PM/v1
ARGS="--models ${LABEL:-q05}=$EP --max-steps ${MAX_STEPS:-10} --max-tokens ${MAX_TOKENS:-512}
  --try-timeout ${TRY_TIMEOUT:-300} --cache $R/sdists --tries ${TRIES:-10}"
[ -n "$TASKS" ] && ARGS="$ARGS --tasks $TASKS"
NT=$($PY -c "import sys; from bench.tasks.suite import load_catalog; print(len(sys.argv[1].split(',')) if sys.argv[1] else len(load_catalog()))" "$TASKS")
AGENTS=${AGENTS:-marathon,plain,mini}
NA=$(echo $AGENTS | tr ',' '\n' | wc -l)
if $PY -c "import sys; from pilot.workflow.schema import ModelSettings as M; sys.exit('tool_calls' not in M.model_fields)" 2>/dev/null \
   && [ -z "$NO_FORCED" ]; then FORCED=1; fi
NT2=0; [ -n "$TASKS2" ] && NT2=$(echo $TASKS2 | tr ',' '\n' | wc -l)
NV=0; [ -n "$VARIANT_SET" ] && NV=1  # Marathon with workflow fields set (--set), a group of its own
echo $(( NT * ${TRIES:-10} * NA + NT * ${FORCED_TRIES:-${TRIES:-10}} * ${FORCED:-0} + NT2 * ${TRIES2:-3} * NA + NT * ${VARIANT_TRIES:-3} * NV )) > $SUITE/planned
ts "suite: $NT tasks x ${TRIES:-10} tries x agents $AGENTS${FORCED:+ + marathon forced}; $(cat $SUITE/planned) tries"
date +%s > $SUITE/t_start
if [ -n "$FORCED" ]; then
  $PY -m bench.tasks.run ${ARGS/--tries ${TRIES:-10}/--tries ${FORCED_TRIES:-${TRIES:-10}}} --agents marathon --call-mode forced --parallel ${PAR_FORCED:-10} \
    --out $SUITE/forced.jsonl --keep $SUITE/keep_forced > $SUITE/forced.log 2>&1 &
fi
if [ -n "$VARIANT_SET" ]; then  # VARIANT_SET="phases.0.retry_fresh=false ..." (space-separated)
  VSETS=""; for kv in $VARIANT_SET; do VSETS="$VSETS --set $kv"; done
  $PY -m bench.tasks.run ${ARGS/--tries ${TRIES:-10}/--tries ${VARIANT_TRIES:-3}} --agents marathon $VSETS \
    --variant "${VARIANT_NAME:-$VARIANT_SET}" --parallel ${PAR_VARIANT:-10} \
    --out $SUITE/variant.jsonl --keep $SUITE/keep_variant > $SUITE/variant.log 2>&1 &
fi
if [ -n "$TASKS2" ]; then  # a second set of tasks at its own number of tries, beside the first
  $PY -m bench.tasks.run ${ARGS/--tries ${TRIES:-10}/--tries ${TRIES2:-3}} --tasks $TASKS2 --agents $AGENTS \
    --parallel ${PAR2:-8} --out $SUITE/second.jsonl --keep $SUITE/keep_second > $SUITE/second.log 2>&1 &
fi
$PY -m bench.tasks.run $ARGS --agents $AGENTS --parallel ${PAR:-30} \
  --out $SUITE/auto.jsonl --keep $SUITE/keep_auto > $SUITE/auto.log 2>&1
wait
date +%s > $SUITE/t_end; mark suite${SUITE_KIND:+_$SUITE_KIND}; ts "suite ${SUITE_KIND} done"
