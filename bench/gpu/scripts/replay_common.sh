# Sourced by the replay phases (r2, r3, r4; issue 23): brain bench --replay of the shipped
# recordings against real vLLM servers. Needs common.sh first.
REPO=${ROOT:-$R/m}; RP=$REPO/bench/replays
RB=$ART/replay; mkdir -p $RB
# PHASE_S: seconds this device call may take; a replay that would not end in time is skipped so
# that the phase still packs its results
DEADLINE=$(( $(date +%s) + ${PHASE_S:-560} ))
# rprofile NAME MODEL PORT SPEC(on|off) PREFIX(on|off) [LOADFORMAT]: a 64K-window profile that
# reports each request's cached tokens (--enable-prompt-tokens-details)
rprofile() {
  local method; method=$(echo "$SPEC" | sed 's/.*"method":"\([^"]*\)".*/\1/')
  {
    echo "name: $1"; echo "description: replay bench on the lent H200 ($2)"; echo "backend: process"
    echo "model: $2"; echo "served_model_name: smol"; echo "host: 127.0.0.1"; echo "port: $3"
    echo "max_model_len: 65536"; echo "gpu_memory_utilization: 0.25"
    echo "tool_call_parser: hermes"; echo "enable_auto_tool_choice: true"
    [ "$5" = off ] && echo "enable_prefix_caching: false"
    [ -n "$6" ] && echo "load_format: $6"
    if [ "$4" = on ]; then
      echo "speculative:"; echo "  method: $method"; echo "  num_speculative_tokens: 2"
      echo "  extra: {prompt_lookup_max: 4, prompt_lookup_min: 2}"
    fi
    echo "extra_args: [--enable-prompt-tokens-details]"
    echo "timeouts: {load_timeout_s: 420, stop_timeout_s: 30}"
  } > $R/prof_$1.yaml
  echo $R/prof_$1.yaml
}
# long_config DIR: the model's config with a 64K position range (SmolLM2 says 8192; the 200-step
# recording reaches ~28K tokens; dummy weights do not care, real ones degrade past 8K)
long_config() { $PY - $1/config.json <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 65536; json.dump(c, open(sys.argv[1], "w"), indent=1)
PYEOF
}
# metrics PORT NAME: the cache/preemption/spec lines of /metrics (small)
metrics() { curl -s -m 5 http://127.0.0.1:$1/metrics | grep -E '^vllm:(prefix_cache|external_prefix|num_preemptions|prompt_tokens_total|generation_tokens_total|spec_decode|cache_config_info|kv_cache_usage|request_success_total)' > $RB/metrics_$2.txt; wc -l < $RB/metrics_$2.txt; }
# replay NAME URL_A URL_B LABELS ARGS...: brain bench --replay --compare, JSON + Markdown + console
replay() {
  local n=$1 a=$2 b=$3 l=$4; shift 4
  if [ -n "$DEADLINE" ] && [ $(( $(date +%s) + ${RNEED:-60} )) -gt $DEADLINE ]; then ts "replay $n skipped: too little time left in this call"; return 0; fi
  ts "replay $n: $a vs $b ($l) $*"
  local T=$(now)
  timeout ${RTIMEOUT:-240} brain bench $a --compare $b --labels $l "$@" -q --json $RB/$n.json --markdown $RB/$n.md > $RB/$n.txt 2>&1
  echo "rc=$? wall=$(since $T)" >> $RB/$n.txt; tail -4 $RB/$n.txt
}
# up PROFILE LOG: brain up, one server at a time (memory profiling of two at once charges each
# other's allocations), the wall as a figure
up() { ts "brain up $1"; local T=$(now); timeout 420 brain up $1 > $B/$2.txt 2>&1; echo "### rc=$? wall $(since $T)" >> $B/$2.txt; tail -3 $B/$2.txt; fig ${2}_wall_s $(since $T); }
rpack() { # rpack NAME: the replay outputs, small, into $OUT
  [ -n "$OUT" ] || return 0
  tar -czf $OUT/$1.tgz -C $R art logs state/marathon/brain/logs 2>/dev/null
  cp $ART/${1}_console.txt $OUT/ 2>/dev/null; ls -la $OUT
}
