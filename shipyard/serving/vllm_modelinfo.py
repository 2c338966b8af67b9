"""vLLM's model-info cache, filled when the vllm runtime image is built.

Before vLLM loads a model it inspects the model's class (does it generate text, take LoRA, need
a pooling head...). It does that in a subprocess, which imports vLLM once more (about 12 CPU
seconds, minutes on a busy node), unless ``$VLLM_CACHE_ROOT/modelinfos`` (``~/.cache/vllm``)
already holds the answer for that class's source file. The image build runs this module as the
image's user, so the answers for the architectures shipyard serves are in the image and every
step that starts a vLLM server (measure, benchmark, the judge, the rehearsal's KServe) starts
without that subprocess. It is only a cache: another architecture is inspected at start-up as
before, and an answer vLLM finds stale (another vLLM) is inspected again.

Runs in the vllm runtime (``python -m shipyard.serving.vllm_modelinfo``).
"""

from __future__ import annotations

import sys

#: the architectures whose answers the image carries: the tiny test model and SmolLM2 (Llama),
#: and the model families shipyard's presets and examples serve
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def fill_modelinfo_cache(architectures: tuple[str, ...] = ARCHITECTURES) -> dict[str, str]:
    """Inspect each architecture the way vLLM does at start-up (its registry's own lazy model
    entry, which writes the cache); returns ``{architecture: "cached" or why not}``."""
    try:
        from vllm.model_executor.models.registry import ModelRegistry
    except Exception as err:  # noqa: BLE001 - a cache miss is harmless: vLLM inspects at start-up
        return dict.fromkeys(architectures, f"not cached (vLLM did not import: {_first_line(err)})")
    outcome: dict[str, str] = {}
    for arch in architectures:
        entry = ModelRegistry.models.get(arch)
        if entry is None:
            outcome[arch] = "not in this vLLM's registry"
            continue
        try:
            entry.inspect_model_cls()
        except Exception as err:  # noqa: BLE001 - as above
            outcome[arch] = f"not cached ({_first_line(err)})"
        else:
            outcome[arch] = "cached"
    return outcome


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0][:200] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def main() -> int:
    """Fill the cache and print one line per architecture; never fails the image build."""
    for arch, state in fill_modelinfo_cache().items():
        print(f"vLLM model-info cache: {arch}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
