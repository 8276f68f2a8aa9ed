"""config.json, tokenizer and chat template of Qwen2.5-Coder-0.5B-Instruct, from its GGUF (here,
no GPU): make_qwen_hf.py GGUF OUT_DIR. Prints the config and a prompt rendered with tools."""

import json
import os
import sys

from transformers import AutoConfig, AutoTokenizer

gguf, out = sys.argv[1:3]
d, name = os.path.dirname(gguf), os.path.basename(gguf)
cfg = AutoConfig.from_pretrained(d, gguf_file=name)
tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
os.makedirs(out, exist_ok=True)
c = cfg.to_dict()
c["architectures"] = ["Qwen2ForCausalLM"]
c.setdefault("torch_dtype", "bfloat16")
c["dtype"] = "bfloat16"
print(
    json.dumps(
        {
            k: c.get(k)
            for k in (
                "architectures",
                "model_type",
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "max_position_embeddings",
                "rope_theta",
                "rope_parameters",
                "tie_word_embeddings",
                "bos_token_id",
                "eos_token_id",
                "sliding_window",
                "use_sliding_window",
            )
        }
    )
)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(c, f, indent=1)
tok.save_pretrained(out)
print(sorted(os.listdir(out)))
print("eos", tok.eos_token, tok.eos_token_id, "pad", tok.pad_token, "len", len(tok))
tools = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
msgs = [
    {"role": "system", "content": "SYS"},
    {"role": "user", "content": "Read a.py"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": {"path": "a.py"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
]
print(tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True))
