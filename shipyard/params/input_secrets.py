"""Which contract Secrets each step's inputs need, derived from the parameters.

A step reads a Secret only when the cluster config gives it (``secrets.<name>.steps`` in
``pipelines/cluster.yaml``, mounted optional): a step that reads an ``s3://`` input without
Secret ``shipyard-s3`` fails in the cluster with an empty endpoint, after the GPU work when it is
the deploy step. This module says, for each parameter that can carry a URI, which steps read it
(:data:`READERS`) and which Secret each URI scheme needs (:data:`SCHEME_SECRETS`), so that:

* :func:`contract_gaps` lists the steps a cluster config forgets (compile wiring and its test);
* :func:`needed_secrets` gives, for one run's values, each step's Secrets and the parameters
  that need them;
* :func:`check_input_secrets` (the pre-flight) fails in one line, naming the parameter, the step
  and the cluster config's entry to change, when this run needs a Secret a step is not given;
* :func:`check_s3_endpoint` (``run --local`` before anything is written, and the pre-flight) refuses
  an S3 endpoint in the environment that carries credentials when this run reads an ``s3://`` input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from shipyard.core.contract import HF_SECRET, S3_SECRET
from shipyard.core.errors import ShipyardError
from shipyard.models.s3 import endpoint_setting

#: the judge model's URI inside ``eval_sets``: read by other steps than the sets themselves
JUDGE = "eval_sets.judge.model_uri"
#: parameter -> the steps (KFP component names, as the cluster config names them) that read the
#: URIs it gives: the model (pin, then fetch), the calibration data, the LoRA adapters, the deploy
#: config's ``template`` (an ``s3://BUCKET/KEY.yaml`` LLMInferenceService, read by the deploy step)
READERS: dict[str, tuple[str, ...]] = {
    "model_uri": ("pin-model", "resolve-model"),
    "candidate_uri": ("pin-model", "resolve-model"),
    "calibration_dataset": ("compress", "prepare-eval-sets"),  # the eval sets' leak check reads it too
    "lora_adapters": ("fetch-adapters",),
    "deploy_config": ("deploy",),
    # the sets and the judge's labelled slice (pinned, then prepared)
    "eval_sets": ("pin-eval-sets", "prepare-eval-sets"),
    # the judge model of eval_sets: pinned and fetched once per run like the base model (the
    # judge step serves that artifact and reads no URI)
    JUDGE: ("pin-model", "resolve-model"),
}
#: URI scheme -> the Secret reading it needs (hf:// without a token works for public repos only)
SCHEME_SECRETS: dict[str, str] = {"s3://": S3_SECRET, "hf://": HF_SECRET}
#: which schemes each parameter can carry (the deploy config's template is s3:// only)
SCHEMES: dict[str, tuple[str, ...]] = {
    "model_uri": ("s3://", "hf://"), "candidate_uri": ("s3://",), "calibration_dataset": ("s3://",),
    "lora_adapters": ("s3://", "hf://"), "deploy_config": ("s3://",), "eval_sets": ("s3://",),
    JUDGE: ("s3://", "hf://"),
}


def _loaded(value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def input_uris(params: Mapping[str, Any]) -> dict[str, list[str]]:
    """Parameter -> the URIs this run's value of it names (only the parameters of :data:`READERS`;
    a value the parameter checks refuse names none)."""
    out: dict[str, list[str]] = {}
    for name in READERS:
        value = _loaded(params.get("eval_sets" if name == JUDGE else name))
        judge = value.get("judge") if name in ("eval_sets", JUDGE) and isinstance(value, dict) else None
        if name == "deploy_config":
            template = value.get("template") if isinstance(value, dict) else None
            uris = [template] if isinstance(template, str) else []
        elif name == "lora_adapters":
            items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
            uris = [i.get("uri") if isinstance(i, dict) else i for i in items]
        elif name == "eval_sets":
            sets = value.get("sets") if isinstance(value, dict) else value
            uris = [s.get("uri") for s in sets if isinstance(s, dict)] if isinstance(sets, list) else []
            if isinstance(judge, dict):
                uris.append(judge.get("labels_uri"))
        elif name == JUDGE:
            uris = [judge.get("model_uri")] if isinstance(judge, dict) else []
        else:
            uris = [value]
        found = [u.strip() for u in uris if isinstance(u, str) and u.strip()]
        if found:
            out[name] = found
    return out


def needed_secrets(params: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Step -> Secret -> the parameters whose URIs in this run make the step need it."""
    out: dict[str, dict[str, list[str]]] = {}
    for name, uris in input_uris(params).items():
        for scheme, secret in SCHEME_SECRETS.items():
            if scheme in SCHEMES[name] and any(u.startswith(scheme) for u in uris):
                for step in READERS[name]:
                    out.setdefault(step, {}).setdefault(secret, []).append(name)
    return out


def step_secrets(cfg: Mapping[str, Any]) -> dict[str, list[str]]:
    """Step -> the Secrets a cluster config gives it (``secrets.<name>.steps``)."""
    out: dict[str, set[str]] = {}
    for secret, entry in (cfg.get("secrets") or {}).items():
        for step in (entry.get("steps") or []) if isinstance(entry, dict) else []:
            out.setdefault(str(step), set()).add(str(secret))
    return {step: sorted(names) for step, names in sorted(out.items())}


def contract_gaps(cfg: Mapping[str, Any], steps: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
    """(Secret, step, parameter) for every step that reads a parameter which can carry that
    Secret's scheme but is not given the Secret by ``cfg``; ``steps``: the steps a pipeline has
    (default: every reader). Empty for a config that cannot fail this way."""
    given = step_secrets(cfg)
    present = set(steps) if steps is not None else None
    gaps = []
    for name, readers in READERS.items():
        for scheme in SCHEMES[name]:
            secret = SCHEME_SECRETS[scheme]
            if secret not in (cfg.get("secrets") or {}):
                continue
            gaps += [(secret, step, name) for step in readers
                     if (present is None or step in present) and secret not in given.get(step, [])]
    return sorted(set(gaps))


def check_input_secrets(params: Mapping[str, Any], given: Mapping[str, Iterable[str]]) -> None:
    """The pre-flight's check: every step that reads one of this run's ``s3://`` inputs is given
    Secret ``shipyard-s3`` (``given``: step -> Secrets, as compiled; a step absent has none). One
    line otherwise, naming the
    parameter, the step and the fix (the cluster config, not creating the Secret). An ``hf://``
    input without ``hf-token`` is not refused: public repositories need none."""
    for step, secrets in sorted(needed_secrets(params).items()):
        for secret, names in sorted(secrets.items()):
            if secret != S3_SECRET or secret in set(given.get(step) or []):
                continue
            field = "deploy_config.template" if names[0] == "deploy_config" else names[0]
            raise ShipyardError(
                field, f"names an s3:// object that step {step} reads, and the pipeline was compiled without "
                f"Secret {secret} for {step} (it would fail there with no S3 endpoint"
                f"{', after the GPU work' if step == 'deploy' else ''})",
                f"add {step} to secrets.{secret}.steps in the cluster config and compile again (the Secret itself "
                "is fine where it is); or give the value another way than s3://")


def check_s3_endpoint(params: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
    """When this run reads an ``s3://`` input, the S3 endpoint the steps will use (``AWS_ENDPOINT_URL_S3``
    and its alternatives in ``env``, default this environment; in a cluster the Secret shipyard-s3's,
    where the step is given it) is refused up front when it carries credentials: one line naming the
    variable, the value never shown, nothing contacted (:func:`shipyard.models.s3.endpoint_setting`,
    the check every S3 client makes)."""
    if any(S3_SECRET in secrets for secrets in needed_secrets(params).values()):
        endpoint_setting(os.environ if env is None else env)


def parse_step_secrets(raw: str) -> dict[str, list[str]] | None:
    """``SHIPYARD_STEP_SECRETS`` as compiled (``{step: [Secret, ...]}``), None when unset or unreadable."""
    try:
        data = json.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): [str(s) for s in v] for k, v in data.items() if isinstance(v, list)}
