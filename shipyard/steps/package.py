"""Package step: the model folder as a digest-pinned OCI modelcar image or ORAS artifact.

Builds an OCI image layout (no Docker engine), pushes it when a registry is given, and returns
the digest-pinned reference the deploy step uses. See :mod:`shipyard.oci.modelcar` for the image format
and :mod:`shipyard.oci.auth` / :mod:`shipyard.oci.client` for credentials, TLS and
retries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipyard.compression.recipes import recipe_label
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir
from shipyard.core.report import markdown_html
from shipyard.gates.selection import champion_selection
from shipyard.oci.layout import layout_reference
from shipyard.oci.modelcar import build_modelcar, build_oras_artifact
from shipyard.oci.transfer import push_layout
from shipyard.runtimes.runtime import call_step
from shipyard.serving.kserve.render import copy_model_files
from shipyard.steps.attest import attest_if_keyed
from shipyard.steps.register import register_champion
from shipyard.tracking.steprun import StepRun

MODES = ("modelcar", "oras")
SUMMARY_JSON = "shipyard-package.json"
SUMMARY_MD = "shipyard-package.md"
SUMMARY_HTML = "shipyard-package.html"


#: What a package result puts on the KFP artifact's metadata (everything but the annotations).
ARTIFACT_KEYS = ("uri", "digest", "tag", "tag_ref", "mode", "size_bytes", "layers", "model_digest")


def artifact_metadata(result: dict[str, Any]) -> dict[str, Any]:
    """The metadata the package wrappers put on their modelcar artifact."""
    return {k: result[k] for k in ARTIFACT_KEYS}


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Packaged model ({result['mode']})",
        "",
        f"- **Reference (digest-pinned):** `{result['uri']}`",
        f"- **Tag:** `{result['tag']}`" + (f" (`{result['tag_ref']}`)" if result.get("tag_ref") else ""),
        f"- **Size:** {result['size_bytes'] / 1e6:.2f} MB in {len(result['layers'])} layers",
        f"- **Model tree digest:** `{result['model_digest']}`",
        "",
        "| layer | media type | size (bytes) |",
        "|---|---|---:|",
    ]
    lines += [f"| `{la['digest']}`{' ' + la['title'] if la.get('title') else ''} | {la['mediaType']} | {la['size']} |"
              for la in result["layers"]]
    lines += ["", "## Annotations", "", "| key | value |", "|---|---|"]
    lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in sorted(result["annotations"].items())]
    return "\n".join(lines) + "\n"


def package_model(model_dir: str, out_dir: str, registry: str = "", repository: str = "", tag: str = "",
                  mode: str = "modelcar", base_image: str = "", annotations: str | dict[str, Any] = "",
                  insecure_tls: bool = False) -> dict[str, Any]:
    """Build the modelcar (or ORAS artifact) of ``model_dir`` as an OCI layout at ``out_dir``.

    With ``registry`` (``host[:port]``, ``http://host:port`` for plain HTTP) the image is pushed
    to ``registry/repository:tag`` and ``uri`` is ``oci://REGISTRY/REPO@sha256:...``; with
    ``registry=""`` the layout on disk is the result and ``uri`` is
    ``oci:///ABS/OUT_DIR@sha256:...``. ``out_dir`` (layout plus ``shipyard-package.{json,md,html}``)
    appears only when everything, the push included, succeeded.
    """
    if mode not in MODES:
        raise ShipyardError("mode", f"unknown mode {mode!r}", f"use one of {', '.join(MODES)}")
    registry = (registry or "").strip()
    repository = (repository or "").strip().strip("/")
    if registry and not repository:
        raise ShipyardError("repository", "is empty but a registry is given", "name the repository, e.g. team/my-model")
    out = Path(out_dir)
    with atomic_dir(out) as stage:
        if mode == "modelcar":
            built = build_modelcar(model_dir, stage, tag=tag, base_image=base_image, annotations=annotations,
                                       insecure_tls=insecure_tls)
        else:
            built = build_oras_artifact(model_dir, stage, tag=tag, annotations=annotations)
        result: dict[str, Any] = {k: built[k] for k in ("mode", "tag", "digest", "size_bytes", "layers", "annotations",
                                                         "model_digest")}
        if registry:
            pushed = push_layout(stage, registry, repository, built["tag"], insecure_tls=insecure_tls)
            result.update(uri=pushed["uri"], tag_ref=pushed["tag_ref"], bytes_sent=pushed["bytes_sent"], registry=registry)
        else:
            result.update(uri=layout_reference(out, built["digest"]), tag_ref="", bytes_sent=0, registry="")
        result["layout"] = str(out.resolve())
        result["files"] = built["files"]
        md = _markdown(result)
        (stage / SUMMARY_JSON).write_text(json.dumps(result, indent=2, sort_keys=True))
        (stage / SUMMARY_MD).write_text(md)
        (stage / SUMMARY_HTML).write_text(markdown_html(md))
    return result


def package_record(result: dict[str, Any], out_dir: str, report_md: str = "") -> dict[str, Any]:
    """The package step's MLflow record (:meth:`StepRun.log`'s arguments) of :func:`package_model`'s
    ``result``: its URI, size, digest and reports (never the layout or the weights). ``out_dir``: the
    package folder; ``report_md``: the Markdown report logged as package.md (default: the one in ``out_dir``),
    beside package.html (the page that fits MLflow's artifact viewer)."""
    return {"params": {"uri": result["uri"]}, "metrics": {"size_bytes": result["size_bytes"]},
            "tags": {"shipyard.oci_digest": result["digest"]},
            "artifacts": {"package.json": f"{out_dir}/{SUMMARY_JSON}", "package.md": report_md or f"{out_dir}/{SUMMARY_MD}",
                          "package.html": f"{out_dir}/{SUMMARY_HTML}"}}


def package_champion_task(*, model_dir: str, selection_dir: str, modelcar_dir: str, summary_path: str,
                          decision_path: str, model_files_dir: str, registry: str, repository: str, mode: str,
                          base_image: str, insecure_tls: bool, model_name: str, base_model_uri: str,
                          champion_tolerance: float, tracking_uri: str = "", experiment: str = "",
                          kfp_run_id: str = "") -> dict[str, Any]:
    """The package-champion step as its KFP wrapper runs it, with its outputs' paths, inside the step's
    MLflow run: :func:`package_model` (the champion of ``selection_dir``, annotated with its recipe,
    source model and pipeline run), its signed evidence when a key is configured
    (:func:`shipyard.steps.attest.attest_if_keyed`), the model's small files for the deploy step
    (:func:`shipyard.serving.kserve.render.copy_model_files`), then its registration and gate against
    ``production`` (:func:`shipyard.steps.register.register_champion`, report at ``decision_path``).

    Returns ``passed`` (deploy the champion and give it 'production') and ``metadata`` per output
    (``modelcar``, ``model_files``, ``package_summary``, ``decision``)."""
    import shutil

    recipe = champion_selection(selection_dir)["champion"]["recipe"]
    annotations = json.dumps({"recipe": recipe_label(recipe), "source_model": base_model_uri,
                              "pipeline_run": kfp_run_id})
    with StepRun("package", recipe, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"registry": registry, "repository": repository, "mode": mode, "model_name": model_name,
                         "champion_tolerance": champion_tolerance}) as run:
        packed = call_step("base", package_model, model_dir=model_dir,
                           out_dir=modelcar_dir, registry=registry, repository=repository, tag="", mode=mode,
                           base_image=base_image, annotations=annotations, insecure_tls=insecure_tls)
        # the gates' evidence, signed and stored with the modelcar (OCI referrers), when a key is configured
        attested = call_step("base", attest_if_keyed, package_dir=modelcar_dir, selection=selection_dir,
                             model_dir=model_dir, base_model_uri=base_model_uri, kfp_run_id=kfp_run_id,
                             insecure_tls=insecure_tls)
        shutil.copyfile(f"{modelcar_dir}/{SUMMARY_MD}", summary_path)
        small = call_step("base", copy_model_files, model_dir=model_dir, out_dir=model_files_dir)
        print(f"packaged: {packed['uri']}", flush=True)
        run.log(**package_record(packed, modelcar_dir, summary_path))
        out = call_step("base", register_champion, tracking_uri=tracking_uri,
                        experiment=experiment, kfp_run_id=kfp_run_id, model_name=model_name,
                        source_uri=packed["uri"], digest=packed["digest"], selection_dir=selection_dir,
                        base_model_uri=base_model_uri, champion_tolerance=champion_tolerance,
                        report_path=decision_path, attestation=modelcar_dir if attested["attested"] else "")
        run.log(params={"version": out["version"], "champion_version": out["champion_version"] or "none"},
                metrics={"gate.passed": float(out["passed"])},
                tags={"shipyard.gate.reason": out["reason"][:5000]}, artifacts={"champion-gate.md": decision_path})
    print(("PASSED: " if out["passed"] else "REFUSED: ") + out["reason"], flush=True)
    return {"passed": bool(out["passed"]), "metadata": {
        "modelcar": artifact_metadata(packed), "model_files": small,
        "package_summary": {"uri": packed["uri"], "digest": packed["digest"], "attestation": attested["note"]},
        "decision": out["metadata"]}}
