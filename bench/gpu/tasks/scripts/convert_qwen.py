"""Qwen2.5-Coder-0.5B-Instruct's Q4_K_M GGUF -> bf16 model.safetensors beside the config.

convert_qwen.py GGUF OUT_DIR. OUT_DIR already holds config.json and the tokenizer (made from the
same GGUF). transformers will not save_pretrained a model loaded from a GGUF, so the state dict
is written directly (lm_head is tied to the embeddings, as the config says).
"""

import json
import os
import sys
import time

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

t = time.time()
gguf, out = sys.argv[1:3]
m = AutoModelForCausalLM.from_pretrained(
    os.path.dirname(gguf), gguf_file=os.path.basename(gguf), dtype=torch.bfloat16
)
print("loaded", type(m).__name__, round(time.time() - t, 1), "s")
with open(os.path.join(out, "config.json")) as f:
    cfg = json.load(f)
sd = {k: v.contiguous() for k, v in m.state_dict().items()}
if cfg.get("tie_word_embeddings", False):
    lm, emb = sd.pop("lm_head.weight", None), sd["model.embed_tokens.weight"]
    if lm is not None:
        print("lm_head equals embeddings:", bool(torch.equal(lm, emb)))
for key, want in (("model.embed_tokens.weight", (cfg["vocab_size"], cfg["hidden_size"])),):
    print(key, tuple(sd[key].shape), "config", want)
print(
    "layers",
    sum(1 for k in sd if k.endswith("input_layernorm.weight")),
    "config",
    cfg["num_hidden_layers"],
)
save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
n = sum(v.numel() for v in sd.values())
print("saved", len(sd), "tensors,", n, "parameters,", round(time.time() - t, 1), "s")
