"""Tool calls through the served model's parser, each tool choice, streamed and not:
smoke.py PORT [N]. Forced (``required``) and named choices go through vLLM's structured-output
backends, so a 500 here means a wheel of ../../wheels.txt is missing on the device."""

import json
import sys
import time
import urllib.error
import urllib.request

port = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1
base = f"http://127.0.0.1:{port}"


def post(path: str, body: dict, stream: bool = False) -> tuple[int, object]:
    req = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            if not stream:
                return r.status, json.loads(r.read())
            return r.status, [ln.decode() for ln in r]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:400]


def streamed(lines: list[str]) -> tuple[dict, str, str | None]:
    calls: dict = {}
    content, finish = "", None
    for ln in (x.strip() for x in lines):
        if not ln.startswith("data: ") or ln == "data: [DONE]":
            continue
        for ch in json.loads(ln[6:]).get("choices", []):
            delta = ch.get("delta", {})
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                f = tc.get("function") or {}
                c["name"] += f.get("name") or ""
                c["arguments"] += f.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return calls, content, finish


def tool(name: str, desc: str, arg: str) -> dict:
    schema = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {
        "type": "function",
        "function": {"name": name, "description": desc, "parameters": schema},
    }


models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=10).read())
print("models:", json.dumps(models)[:300])
name = models["data"][0]["id"]
tools = [
    tool("read_file", "Read a file of the repository.", "path"),
    tool("run", "Run a shell command in the repository.", "command"),
]
prompts = [
    "Read the file setup.py and tell me the package version.",
    "Run the tests with `python -m pytest -q` and tell me how many pass.",
    "What is in toolz/itertoolz.py? Look at it.",
]
choices = {
    "auto": "auto",
    "required": "required",
    "named": {"type": "function", "function": {"name": "read_file"}},
}
for i in range(n):
    p = prompts[i % len(prompts)]
    msgs = [
        {"role": "system", "content": "You are a coding agent. Use the tools."},
        {"role": "user", "content": p},
    ]
    for label, choice in choices.items():
        body = {"model": name, "messages": msgs, "tools": tools, "tool_choice": choice}
        body |= {"temperature": 0.0, "max_tokens": 200}
        t = time.time()
        st, out = post("/v1/chat/completions", body)
        if st != 200:
            print(f"{label:8} plain  HTTP {st}: {out}")
        else:
            m = out["choices"][0]
            calls = json.dumps(m["message"].get("tool_calls"))[:240]
            print(
                f"{label:8} plain  {time.time() - t:.2f}s finish={m['finish_reason']} "
                f"tool_calls={calls} content={json.dumps(m['message'].get('content'))[:160]}"
            )
        t = time.time()
        st, lines = post("/v1/chat/completions", body | {"stream": True}, stream=True)
        if st != 200:
            print(f"{label:8} stream HTTP {st}: {lines}")
            continue
        calls, content, finish = streamed(lines)
        print(
            f"{label:8} stream {time.time() - t:.2f}s finish={finish} "
            f"tool_calls={json.dumps(calls)[:240]} content={json.dumps(content)[:160]}"
        )
