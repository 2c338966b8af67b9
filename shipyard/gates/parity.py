"""Evaluation parity: a recovery figure means something only when base and candidate were
evaluated the same way.

lm-eval's own issues show the backend, the chat template or the generation settings alone
moving a score by up to 24 points (lm-evaluation-harness #2851, #3150, #1841). Before any
recovery is computed, :func:`check_parity` compares what each evaluate step recorded in its
``summary.json``: the lm-eval version, the backend, the tasks and their versions, few-shot
settings, generation settings, the seed and limit, and (when the chat template is applied) the
chat template by hash. With per-sample logs it also compares the prompt of every question both
answered (lm-eval's ``prompt_hash``), which catches any difference in how prompts were built.
The first difference is refused in one line that names it.

A cached base result is keyed by model content (tokenizer and chat template included), the eval
config and the lm-eval version (:mod:`shipyard.evaluation.cache`), so a base evaluated
differently is re-run, not reused.
"""

from __future__ import annotations

from typing import Any

from shipyard.core.errors import ShipyardError

#: eval-config keys that change what is asked or how it is scored
CONFIG_KEYS = ("tasks", "num_fewshot", "limit", "apply_chat_template", "gen_kwargs", "seed", "task_dir")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def differences(base: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """What differs between two evaluate summaries, as ``what: base vs candidate`` texts."""
    found = []
    for key in ("lm_eval_version", "backend"):
        if base.get(key) != candidate.get(key):
            found.append(f"{key}: {_short(base.get(key))} vs {_short(candidate.get(key))}")
    b_lora, c_lora = (base.get("adapter") or {}).get("digest"), (candidate.get("adapter") or {}).get("digest")
    if b_lora != c_lora:  # a LoRA adapter's gate compares the same adapter on both models, or none on either
        found.append(f"LoRA adapter (digest): {str(b_lora)[:19]} vs {str(c_lora)[:19]}")
    b_cfg, c_cfg = base.get("config") or {}, candidate.get("config") or {}
    for key in CONFIG_KEYS:
        if b_cfg.get(key) != c_cfg.get(key):
            found.append(f"eval_config.{key}: {_short(b_cfg.get(key))} vs {_short(c_cfg.get(key))}")
    b_ver, c_ver = base.get("task_versions") or {}, candidate.get("task_versions") or {}
    for task in sorted(set(b_ver) & set(c_ver)):
        if b_ver[task] != c_ver[task]:
            found.append(f"version of task {task}: {_short(b_ver[task])} vs {_short(c_ver[task])}")
    b_shot, c_shot = base.get("n_shot") or {}, candidate.get("n_shot") or {}
    for task in sorted(set(b_shot) & set(c_shot)):
        if b_shot[task] != c_shot[task]:
            found.append(f"few-shot count of task {task}: {b_shot[task]} vs {c_shot[task]}")
    if b_cfg.get("apply_chat_template") and base.get("chat_template_sha256") != candidate.get("chat_template_sha256"):
        found.append(f"chat template (sha256): {str(base.get('chat_template_sha256'))[:12]} vs "
                     f"{str(candidate.get('chat_template_sha256'))[:12]}")
    return found


def prompt_differences(base: dict[str, dict[Any, dict[str, Any]]],
                       candidate: dict[str, dict[Any, dict[str, Any]]]) -> list[str]:
    """Questions both logged whose prompts differ (lm-eval's ``prompt_hash``), per task. Rows are
    keyed ``(doc_id, filter)`` (:func:`shipyard.gates.paired.load_samples`): a question counts once."""
    found = []
    for task in sorted(set(base) & set(candidate)):
        diff = {key[0] if isinstance(key, tuple) else key for key in set(base[task]) & set(candidate[task])
                if base[task][key].get("prompt_hash") != candidate[task][key].get("prompt_hash")}
        if diff:
            found.append(f"task {task}: {len(diff)} question(s) asked with different prompts "
                         f"(first doc_id {sorted(diff, key=str)[0]})")
    return found


def check_parity(base: dict[str, Any], candidate: dict[str, Any],
                 base_samples: dict[str, dict[Any, dict[str, Any]]] | None = None,
                 candidate_samples: dict[str, dict[Any, dict[str, Any]]] | None = None) -> None:
    """Refuse, in one line naming the first difference, a comparison of unlike evaluations."""
    found = differences(base, candidate)
    if base_samples and candidate_samples:
        found += prompt_differences(base_samples, candidate_samples)
    if found:
        others = [f.split(":", 1)[0] for f in found[1:]]
        more = f" (also: {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})" if others else ""
        raise ShipyardError("eval parity", f"base and candidate were evaluated differently: {found[0]}{more}",
                            "evaluate both with the same eval_config, backend, lm-eval version and chat template")
