# The knobs of the second 2026-12-06 sitting (copied to .gpucarry/scripts/env.sh): the 1.5B on
# every task (21) at 10 tries, Marathon and mini-swe-agent on the same server, its forced group at
# 3 and the stock workflow 5 times; the 0.5B (carried while the 1.5B's suite runs) on the 12
# tasks of the 2026-12-02 sitting at 10 tries (its figure to beat: Marathon 5/120; mini-swe-agent
# made no call in 147 tries at this size on 2026-12-06, so it is left out), its forced group at 3;
# 10 requests and 512 tokens an answer for every agent, as before.
TRIES=10 PAR=24 PAR_FORCED=8 FORCED_TRIES=3
TASKS=inflection-ordinal-teens,inflection-dasherize-swap,inflection-doctest-humanize,inflection-rename-dasherize,inflection-feature-separator,inflection-refactor-id-regex,toolz-frequencies-count,toolz-interpose-leading,toolz-doctest-last,toolz-feature-count-if,semver-bump-patch,semver-bump-minor-resets-patch
AGENTS=marathon MAX_STEPS=10 MAX_TOKENS=512 TRY_TIMEOUT=300
WF_RUNS=0
TASKS15= TRIES15=10 AGENTS15=marathon,mini PAR15=30 PAR_FORCED15=10 FORCED_TRIES15=3
WF_RUNS15=5 WF_TIMEOUT=420
