"""SmolLM2's GGUF -> bf16 safetensors with the config and tokenizer beside it.

convert2.py GGUF_DIR GGUF_NAME OUT_DIR TOKENIZER_DIR. transformers will not save_pretrained a
model loaded from a GGUF, so the state dict is written directly (lm_head is tied).
"""

import json
import os
import shutil
import sys
import time

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

t = time.time()
gdir, gname, out, tok = sys.argv[1:5]
m = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.bfloat16)
os.makedirs(out, exist_ok=True)
sd = {k: v.contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
with open(os.path.join(tok, "config.json")) as f:
    cfg = json.load(f)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=1)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    shutil.copy(os.path.join(tok, name), os.path.join(out, name))
print("saved", len(sd), "tensors", round(time.time() - t, 1), "s")
