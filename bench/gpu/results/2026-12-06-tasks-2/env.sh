TRIES=2 PAR=24 PAR_FORCED=12 FORCED_TRIES=1
TASKS=inflection-ordinal-teens,inflection-dasherize-swap,inflection-doctest-humanize,inflection-rename-dasherize,inflection-feature-separator,inflection-refactor-id-regex,toolz-frequencies-count,toolz-interpose-leading,toolz-doctest-last,toolz-feature-count-if,semver-bump-patch,semver-bump-minor-resets-patch
AGENTS=marathon MAX_STEPS=10 MAX_TOKENS=512 TRY_TIMEOUT=200
WF_RUNS=1 WF_TIMEOUT=200
