"""Print, as JSON, the value lists an installed vLLM accepts for the fields that
``brain/vllm_choices.py`` records (run in a Python that has vLLM; the optional conformance test
compares the two).

Nothing of the project is imported: this file only reads vLLM.
"""

import json
import os
import typing

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def main() -> int:
    from vllm.config.cache import CacheDType
    from vllm.config.model import ModelDType
    from vllm.config.speculative import SpeculativeMethod
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    out = {
        "DTYPES": [a for a in typing.get_args(ModelDType) if isinstance(a, str)],
        "KV_CACHE_DTYPES": list(typing.get_args(CacheDType)),
        "ATTENTION_BACKENDS": [m.name for m in AttentionBackendEnum],
        "QUANTIZATION_METHODS": list(QUANTIZATION_METHODS),
        "SPECULATIVE_METHODS": list(typing.get_args(SpeculativeMethod)),
        "REASONING_PARSERS": list(ReasoningParserManager.list_registered()),
        "TOOL_CALL_PARSERS": list(ToolParserManager.list_registered()),
        "LOAD_FORMATS": list(_LOAD_FORMAT_TO_MODEL_LOADER),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
