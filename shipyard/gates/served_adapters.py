"""The LoRA adapters a champion is served with: those it passed the per-adapter accuracy gate with
(:mod:`shipyard.gates.adapter_gates`), added to ``deploy_config.lora`` (``spec.model.lora``) by the deploy step.
Pure Python (base runtime)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.records import CANDIDATE_FILE, SELECTION_FILE
from shipyard.gates.selection import champion_selection


def champion_adapters(record: str | dict[str, Any]) -> list[dict[str, Any]]:
    """The adapters a champion passed with (``adapters`` of its candidate record): name, URI, digest.
    ``record``: the record, select_champion's selection folder, or a candidate.json (or its folder)."""
    champion = record
    if not isinstance(record, dict):
        path = Path(record)
        folder = path if path.is_dir() else path.parent
        if not ((folder / SELECTION_FILE).is_file() or (folder / CANDIDATE_FILE).is_file()):
            return []  # another record (a benchmark's golden.json): no adapters were gated
        champion = champion_selection(str(folder))["champion"]
    return [{"name": name, "uri": a.get("uri"), "digest": a.get("digest")}
            for name, a in (champion.get("adapters") or {}).items() if a.get("passed")]


def with_adapters(params: dict[str, Any], adapters: list[dict[str, Any]], dry_run: bool) -> tuple[dict[str, Any], list[str]]:
    """``params`` (a parsed deploy_config) with the champion's ``adapters`` added to ``lora.adapters``;
    returns it and notes for the log. An adapter deploy_config already names with the same URI is kept
    once; with another URI it is one line. URIs KServe cannot load (a local folder) are left out of a
    dry run with a note, and refused for a real deploy (KServe loads hf://, s3://, pvc://)."""
    if not adapters:
        return params, []
    lora = dict(params.get("lora") or {})
    listed = list(lora.get("adapters") or [])
    given = {str(a.get("name")): a for a in listed if isinstance(a, dict)}
    notes = []
    for adapter in adapters:
        name, uri = adapter["name"], str(adapter.get("uri") or "")
        if name in given:
            if given[name].get("uri") != uri:
                raise ShipyardError(f"deploy_config.lora.adapters.{name}", f"names {given[name].get('uri')!r} but the "
                                    f"adapter gated as {name!r} came from {uri!r}",
                                    "drop it from deploy_config.lora (the gated adapters are added), or rename it")
            continue
        if uri.partition("://")[0] not in ("hf", "s3", "pvc") or "://" not in uri:
            if not dry_run:
                raise ShipyardError(f"lora_adapters.{name}", f"{uri!r} is a local folder KServe cannot load",
                                    "publish the adapter to hf://, s3:// or a pvc:// and give that URI")
            notes.append(f"LoRA adapter {name} ({uri}) left out of the dry-run manifest: KServe loads hf://, s3://, pvc://")
            continue
        listed.append({"name": name, "uri": uri})
        notes.append(f"LoRA adapter {name}: {uri} (gated, content {adapter.get('digest')})")
    if not listed:
        return params, notes
    lora["adapters"] = listed
    return {**params, "lora": lora}, notes
