"""LoRA adapters by URI: the ``lora_adapters`` pipeline parameter, and fetching one adapter.

``lora_adapters`` is JSON: a mapping ``{"sql": "hf://org/sql-lora", "support": "s3://bucket/support"}``
or a list ``[{"name": "sql", "uri": "hf://org/sql-lora"}]``. Each URI is a model URI
(:func:`shipyard.models.resolve.parse_model_uri`: ``hf://``, ``s3://``, ``pvc://`` or a local
folder) holding a peft adapter (``adapter_config.json`` + weights). ``oci://`` is refused: KServe
does not load LoRA adapters from OCI yet (kserve#6094), so an adapter shipyard evaluated could
not be deployed. ``embedded://`` names base models, not adapters.

:func:`resolve_adapter` fetches one adapter the way :func:`shipyard.models.resolve.resolve_model`
fetches a model, and pins it by its content digest (the one tree digest,
:func:`shipyard.core.files.tree_digest`), which the eval summaries, the candidate records and
MLflow carry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError, shown
from shipyard.core.files import atomic_dir, tree_digest, tree_files
from shipyard.models.resolve import parse_model_uri

FIELD = "lora_adapters"
ADAPTER_CONFIG = "adapter_config.json"
#: the same names deploy_config.lora takes (shipyard.serving.kserve.config)
NAME_RE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}\Z")
EXAMPLE = '{"sql": "hf://org/sql-lora"}'


@dataclass(frozen=True)
class Adapter:
    """One adapter: its served name and its URI (as given, checked)."""

    name: str
    uri: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "uri": self.uri}


def _entries(value: Any) -> list[tuple[str, Any, Any]]:
    """(field, name, uri) per adapter from a mapping or a list of {name, uri}."""
    if isinstance(value, dict):
        return [(_field(name), name, uri) for name, uri in value.items()]
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict) or set(item) != {"name", "uri"}:
                raise ShipyardError(f"{FIELD}[{i}]", "must be an object with exactly name and uri",
                                    'write [{"name": "sql", "uri": "hf://org/sql-lora"}] or ' + EXAMPLE)
            out.append((f"{FIELD}[{i}]", item["name"], item["uri"]))
        return out
    raise ShipyardError(FIELD, f"must be a JSON mapping of name -> URI or a list of {{name, uri}}, got "
                        f"{type(value).__name__}", f"write e.g. {EXAMPLE}")


def _field(name: Any) -> str:
    """``lora_adapters.NAME`` for the mapping form; a name that is not one is quoted the way errors
    quote values (:func:`shipyard.core.errors.shown`: a newline as ``\\n``, a token not shown), so
    the field stays one line and says what was given."""
    if isinstance(name, str) and NAME_RE.match(name):
        return f"{FIELD}.{name}"
    return f"{FIELD}.{shown(name, 60).strip(chr(39))}"


def parse_adapters(raw: str | list[Any] | dict[str, Any] | None) -> list[Adapter]:
    """The adapters of ``lora_adapters`` (empty or ``[]``/``{}``: none), or one line naming the bad one.

    Names: unique, letters, digits, ``-``, ``_``, ``.`` (what vLLM's ``--lora-modules`` and
    KServe's ``spec.model.lora`` take). URIs: parsed by
    :func:`shipyard.models.resolve.parse_model_uri` (credentials in a URI are refused, never echoed);
    ``oci://`` and ``embedded://`` refused; a local folder must hold ``adapter_config.json``.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return []
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as err:
            raise ShipyardError(FIELD, f"is not valid JSON ({err.msg} at line {err.lineno} column {err.colno})",
                                f"write e.g. {EXAMPLE}") from None
    else:
        value = raw
    adapters: list[Adapter] = []
    seen: set[str] = set()
    for field, name, uri in _entries(value):
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ShipyardError(field, f"{shown(name, 70)} is not an adapter name",
                                "use 1-63 letters, digits, '-', '_' or '.', starting with a letter or digit")
        if name in seen:
            raise ShipyardError(field, f"adapter {name!r} is given twice", "give each adapter its own name")
        seen.add(name)
        if not isinstance(uri, str):
            raise ShipyardError(field, f"the URI must be a string, got {type(uri).__name__}",
                                "write hf://ORG/REPO, s3://BUCKET/PREFIX, pvc://CLAIM/PATH or a local folder")
        scheme = uri.strip().partition("://")[0].lower() if "://" in uri else "file"
        if scheme == "oci":
            raise ShipyardError(field, "KServe does not load LoRA adapters from oci:// yet (kserve#6094), so the "
                                "adapter could be evaluated but never deployed",
                                "publish the adapter to hf://, s3:// or a pvc://")
        if scheme == "embedded":
            raise ShipyardError(field, "embedded:// names a built-in base model, not a LoRA adapter",
                                "give the adapter's hf://, s3://, pvc:// URI or local folder")
        parsed = parse_model_uri(uri, field=field)
        if parsed.scheme == "file":
            check_adapter_folder(parsed.location, field)
        adapters.append(Adapter(name, str(parsed)))
    return adapters


def adapters_json(adapters: list[Adapter]) -> str:
    """The adapters as the canonical JSON list steps pass along (``[]`` for none)."""
    return json.dumps([a.to_dict() for a in adapters])


def check_adapter_folder(path: str | Path, field: str = FIELD) -> Path:
    """A usable peft adapter folder has ``adapter_config.json``; say so plainly when it does not."""
    path = Path(path)
    if not path.is_dir():
        raise ShipyardError(field, f"{str(path)[:200]!r} is not a folder", "give a peft adapter folder "
                            "(adapter_config.json + adapter_model.safetensors)")
    if not (path / ADAPTER_CONFIG).is_file():
        raise ShipyardError(field, f"{path} has no {ADAPTER_CONFIG}", "point at a peft LoRA adapter folder")
    return path


def adapter_identity(path: str | Path, field: str = FIELD) -> dict[str, Any]:
    """Content identity and shape of an adapter folder: ``digest`` (``sha256:...``, the one tree digest),
    ``rank``, ``base_model`` and ``target_modules`` from its ``adapter_config.json``."""
    folder = check_adapter_folder(path, field)
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise ShipyardError(field, f"{folder / ADAPTER_CONFIG} is not readable JSON ({type(err).__name__})",
                            "give the folder peft's save_pretrained wrote") from None
    if not isinstance(config, dict):
        raise ShipyardError(field, f"{folder / ADAPTER_CONFIG} is not a JSON object", "give a peft adapter folder")
    files = tree_files(folder)
    digest, _ = tree_digest(files)
    targets = config.get("target_modules")
    return {"digest": digest, "rank": config.get("r"), "peft_type": config.get("peft_type"),
            "base_model": config.get("base_model_name_or_path"),
            "target_modules": sorted(targets) if isinstance(targets, list) else targets,
            "bytes": sum(p.stat().st_size for _, p in files)}


def resolve_adapter(name: str, uri: str, out_dir: str) -> dict[str, Any]:
    """Fetch adapter ``name`` from ``uri`` into ``out_dir`` (whole or not at all), the way models are
    fetched (:func:`shipyard.models.resolve.resolve_model`), and return ``{name, uri, digest, rank, ...}``:
    the record that pins it by content."""
    from shipyard.models.resolve import resolve_model

    field = f"{FIELD}.{name}"
    resolve_model(uri, out_dir, marker=ADAPTER_CONFIG, field=field)
    return {"name": name, "uri": uri, **adapter_identity(out_dir, field)}


#: the record of a fetched adapters folder (``<folder>/adapters.json``)
RECORD = "adapters.json"


def fetch_adapters(lora_adapters: str, out_dir: str) -> list[dict[str, Any]]:
    """Fetch every adapter of ``lora_adapters`` into ``out_dir/<name>/`` and write ``out_dir/adapters.json``
    (name, URI, content digest, rank per adapter); the folder appears whole or not at all. Returns the
    records (``[]`` and an empty record for no adapters)."""
    adapters = parse_adapters(lora_adapters)
    records = []
    with atomic_dir(Path(out_dir)) as tmp:
        for adapter in adapters:
            records.append(resolve_adapter(adapter.name, adapter.uri, str(tmp / adapter.name)))
        (tmp / RECORD).write_text(json.dumps({"adapters": records}, indent=2))
    return records


def load_adapters(folder: str | Path) -> list[dict[str, Any]]:
    """The adapter records of a folder :func:`fetch_adapters` wrote (``[]`` when it holds none)."""
    path = Path(folder) / RECORD
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ShipyardError(FIELD, f"{path} is not readable JSON", "fetch the adapters again") from None
    records = data.get("adapters") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise ShipyardError(FIELD, f"{path} has no adapters list", "fetch the adapters again")
    return records
