"""``deploy_config``: its one owner and its one parser.

The ``deploy_config`` parameter (pipeline parameter, component input, ``shipyard deploy
--params-file``, ``shipyard check --deploy-config``) is one JSON object: the render parameters of
:class:`~shipyard.serving.kserve.config.DeployConfig` (preset, mode, replicas, template, ...) next to
four option objects the renderer never sees:

* ``apply``: the wait / poll / grace / API timeouts (:func:`shipyard.serving.kserve.config.apply_options`);
* ``verify``: the deployed service's verification (:func:`shipyard.gates.verification.verify_options`);
* ``rollout``: replace in place or a canary (:func:`shipyard.serving.kserve.rollout.rollout_options`);
* ``attestation``: the refusal of a model without a verified, PASSED verification summary and its
  logged override (:func:`shipyard.gates.evidence.attestation_options`).

:func:`parse_deploy_config` reads it once, for the pre-flight (:mod:`shipyard.params.checks`),
the deploy step (:func:`shipyard.steps.deploy.run_deploy`), ``shipyard deploy`` and ``shipyard
check``: every problem is one :class:`~shipyard.core.errors.ShipyardError` line naming
``deploy_config.<field>``. Nothing else takes the raw object apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shipyard.core.jsonargs import json_object
from shipyard.gates.evidence import ATTESTATION_DEFAULTS, attestation_options
from shipyard.gates.verification import verify_options
from shipyard.serving.kserve.config import DeployConfig, apply_options, parse_config
from shipyard.serving.kserve.rollout import rollout_options

FIELD = "deploy_config"
EXAMPLE = '{"mode": "pd", "replicas": 2}'
#: the option objects next to the render parameters
OPTION_KEYS = ("apply", "verify", "rollout", "attestation")


@dataclass(frozen=True)
class DeploySettings:
    """A parsed ``deploy_config``.

    ``params``: the render parameters as given (everything but :data:`OPTION_KEYS`; the deploy step
    adds the champion's adapters, sizing and image to a copy and parses it again with
    :func:`~shipyard.serving.kserve.config.parse_config`); ``config``: ``params`` with the
    overrides, parsed; ``apply``: the apply timeouts in seconds (see
    :func:`~shipyard.serving.kserve.config.apply_options`); ``verify``: ``{"enabled", "dry_run",
    "settings"}``; ``rollout``: ``{"strategy": "replace"}`` or ``{"strategy": "canary", "steps",
    "route"}``; ``attestation``: ``{"require", "key", "insecure_tls", "max_age_days"}``."""

    params: dict[str, Any]
    config: DeployConfig
    apply: dict[str, Any]
    verify: dict[str, Any]
    rollout: dict[str, Any]
    attestation: dict[str, Any] = field(default_factory=lambda: dict(ATTESTATION_DEFAULTS))


def parse_deploy_config(raw: str | dict[str, Any] | None, **overrides: Any) -> DeploySettings:
    """``raw`` (JSON or YAML-flow text, a mapping, or None/"" for ``{}``) as :class:`DeploySettings`;
    ``overrides`` (name, model_uri, namespace, replicas, ...: CLI flags and component inputs, None
    ignored) win over the render parameters. Checked in the order apply, verify, rollout, attestation,
    render parameters; the first problem raises one line. ``raw`` itself is never changed."""
    data = json_object(raw, FIELD, EXAMPLE)
    apply = apply_options(data.get("apply"))
    verify = verify_options(data.get("verify"))
    rollout = rollout_options(data.get("rollout"))
    attestation = attestation_options(data.get("attestation"))
    params = {k: v for k, v in data.items() if k not in OPTION_KEYS}
    config = parse_config(params, **overrides)
    return DeploySettings(params=params, config=config, apply=apply, verify=verify, rollout=rollout,
                          attestation=attestation)
