#!/bin/bash
# The staged work after each carried chunk, in the background and one at a time (flock): each
# piece of the bundle once it is whole, then what it makes possible. Stages (in $R/done):
#   rest   wheels into $R/site, the suite's sdists, the model's config and tokenizer
#   mini   mini-swe-agent's site ($R/minisite) and its `mini` answering --help
#   vllm   vLLM 0.26 unpacked; a dummy-weight server on $PD warms the compile cache meanwhile
#          (with the 1.5B's config when the bundle has it: that model is served first)
#   model15  the 1.5B's GGUF joined, checked and converted to bf16 safetensors; then serve15.sh
#   model  the same for the 0.5B; then serve.sh
source "$(dirname "$0")/common.sh"
exec 9> $R/advance.lock
flock 9
if ! done_ rest && ready rest.tar; then
  ts "rest"; join rest.tar $R/stash/rest.tar || exit 1
  rm -rf $R/stage && mkdir -p $R/stage $R/site $R/sdists && tar -xf $R/stash/rest.tar -C $R/stage && rm $R/stash/rest.tar
  if [ -z "$LOCAL" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $R/site \
      $R/stage/wheels/*.whl 2>&1 | grep -v WARNING | tail -n 3
  fi
  cp $R/stage/sdists/* $R/sdists/
  rm -rf $R/qwen $R/qwen_hf && tar -xJf $R/stage/qwen_hf.tar.xz -C $R && mv $R/qwen_hf $R/qwen
  if [ -f $R/stage/qwen15_hf.tar.xz ]; then
    rm -rf $R/qwen15 $R/qwen15_hf && tar -xJf $R/stage/qwen15_hf.tar.xz -C $R && mv $R/qwen15_hf $R/qwen15
  fi
  make_bins; mark rest; ts "rest done: $(ls $R/stage/wheels | wc -l) wheels, $(ls $R/sdists | wc -l) sdists"
fi
if done_ rest && ! done_ mini && ready minisite.tar.xz; then
  ts "mini"; join minisite.tar.xz $R/stash/minisite.tar.xz || exit 1
  [ -z "$LOCAL" ] && { rm -rf $R/minisite; xz -d < $R/stash/minisite.tar.xz | tar -x -C $R; }
  rm -f $R/stash/minisite.tar.xz
  $R/bin/mini --help > $ART/mini_help.txt 2>&1 && mark mini
  ts "mini: $(head -c 300 $ART/mini_help.txt | tr '\n' ' ')"
fi
if done_ rest && ! done_ vllm && ready vllm.tar.xz; then
  ts "vllm"; join vllm.tar.xz $R/stash/vllm.tar.xz || exit 1
  [ -z "$LOCAL" ] && { mkdir -p $R/vl; xz -d < $R/stash/vllm.tar.xz | tar -x -C $R/vl || exit 1; }
  rm -f $R/stash/vllm.tar.xz; mark vllm; ts "vllm done"
  DM=$R/qwen; [ -d $R/qwen15 ] && DM=$R/qwen15
  P=$(qprofile qdummy $DM $PD dummy)
  bg updummy "timeout 400 brain up $P > $B/up_dummy.txt 2>&1; echo rc=\$? >> $B/up_dummy.txt"
fi
if done_ vllm && ! done_ model15 && ready qwen15.gguf.gz; then
  ts "model15"; mkdir -p $R/gguf15
  join qwen15.gguf.gz $R/stash/qwen15.gguf.gz || exit 1
  if [ -z "$LOCAL" ]; then
    gunzip -c $R/stash/qwen15.gguf.gz > $R/gguf15/qwen.gguf && rm $R/stash/qwen15.gguf.gz
    echo "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  $R/gguf15/qwen.gguf" | sha256sum -c - || exit 1
    T=$(now); $PY $S/convert_qwen.py $R/gguf15/qwen.gguf $R/qwen15 > $ART/convert15.txt 2>&1
    fig convert15_s $(since $T); tail -n 3 $ART/convert15.txt
    [ -f $R/qwen15/model.safetensors ] || { ts "NO WEIGHTS (1.5B)"; exit 1; }
  fi
  mark model15
  bash $S/serve15.sh
fi
if done_ vllm && ! done_ model && ready qwen.gguf.gz; then
  ts "model"; mkdir -p $R/gguf
  join qwen.gguf.gz $R/stash/qwen.gguf.gz || exit 1
  if [ -z "$LOCAL" ]; then
    gunzip -c $R/stash/qwen.gguf.gz > $R/gguf/qwen.gguf && rm $R/stash/qwen.gguf.gz
    echo "${GGUF_SHA:-1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32}  $R/gguf/qwen.gguf" | sha256sum -c - || exit 1
    T=$(now); $PY $S/convert_qwen.py $R/gguf/qwen.gguf $R/qwen > $ART/convert.txt 2>&1
    fig convert_s $(since $T); tail -n 3 $ART/convert.txt
    [ -f $R/qwen/model.safetensors ] || { ts "NO WEIGHTS"; exit 1; }
  fi
  mark model
  bash $S/serve.sh
fi
ts "advance: $(progress)"
