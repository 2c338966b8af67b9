"""Calibration data for llmcompressor: a hub dataset, a local JSONL/Parquet file, or an S3 object."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from shipyard.core.env import TRUE, hub_offline
from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.core.files import package_dir, sha256_file
from shipyard.core.net import call_within, transfer_deadline
from shipyard.models.s3 import client, download_prefix, load_config, parse_s3_uri

DEFAULT_CALIBRATION = str(package_dir("shipyard.compression") / "calibration" / "default.jsonl")


def _read_rows(path: Path, field: str) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        from datasets import Dataset

        return list(Dataset.from_parquet(str(path)))
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise ShipyardError(field, f"{path} line {number} is not JSON", "write one JSON object per line") from None
    return rows


DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


def download_s3(source: str, dest: Path, field: str) -> list[Path]:
    """The data files of ``s3://bucket/key.jsonl`` (that one object) or of ``s3://bucket/prefix``
    (every data file under it), downloaded into ``dest`` and checked (size, and the sha256 the
    object's ``x-amz-meta-sha256`` declares). Calibration data and user eval sets are fetched so."""
    bucket, key = parse_s3_uri(source, field)
    if not key.endswith(DATA_SUFFIXES):
        download_prefix(source, dest / "data")
        return sorted(p for p in (dest / "data").rglob("*") if p.suffix in DATA_SUFFIXES)
    target = dest / Path(key).name
    config = load_config()  # its own one line (a missing key, an endpoint with credentials), not "cannot read"
    try:
        mc = client(config)
        stat = mc.stat_object(bucket, key)
        mc.fget_object(bucket, key, str(target))
    except ShipyardError:  # past SHIPYARD_S3_TIMEOUT_S: one line naming it
        raise
    except Exception as err:  # minio S3Error, urllib3 errors: one line naming the object
        raise ShipyardError(field, f"cannot read {source}: {type(err).__name__}: {err}".splitlines()[0],
                            "check the bucket, the key and the shipyard-s3 credentials") from None
    meta = {k.lower(): v for k, v in (stat.metadata or {}).items()}
    want = str(meta.get("x-amz-meta-sha256", "")).strip().lower()
    if target.stat().st_size != stat.size or (want and sha256_file(target) != want):
        target.unlink(missing_ok=True)
        raise ShipyardError(field, f"{source} changed or arrived damaged (size/sha256 mismatch)", "upload it again")
    return [target]


def load_calibration_texts(
    source: str, *, text_column: str, num_samples: int, seed: int, tokenizer: Any, field: str = "calibration_dataset"
) -> list[str]:
    """Return ``num_samples`` calibration texts (chat ``messages`` rendered with the chat template)."""
    if num_samples <= 0:
        raise ShipyardError("num_calibration_samples", f"must be > 0, got {num_samples}", "use e.g. 512 on a GPU, 16 on a CPU")
    source = (source or DEFAULT_CALIBRATION).strip()
    if source.startswith("s3://"):
        files = download_s3(source, Path(tempfile.mkdtemp(prefix="shipyard-calib-")), field)
        if not files:
            raise ShipyardError(field, f"{source} holds no .jsonl or .parquet file", "point at a JSONL or Parquet object")
        rows = [r for f in files for r in _read_rows(f, field)]
    elif Path(source).expanduser().exists():
        rows = _read_rows(Path(source).expanduser(), field)
    elif source.endswith((".jsonl", ".json", ".parquet")) or source.startswith(("/", ".")):
        raise ShipyardError(field, f"calibration file {source} does not exist", "give an existing JSONL/Parquet file")
    else:
        rows = _load_hub_rows(source, field, num_samples, seed)
    if not rows:
        raise ShipyardError(field, f"{source} is empty", "give at least one calibration sample")
    texts: list[str] = []
    for row in rows:
        if text_column in row and isinstance(row[text_column], str):
            texts.append(row[text_column])
        elif "messages" in row and isinstance(row["messages"], list):
            texts.append(tokenizer.apply_chat_template(row["messages"], tokenize=False))
        else:
            raise ShipyardError(
                "text_column",
                f"{source} has no text column {text_column!r} (columns: {sorted(row)})",
                "set text_column to the column holding the text, or give chat 'messages'",
            )
    import random

    random.Random(seed).shuffle(texts)
    return texts[:num_samples]


def calibration_rows(source: str, text_column: str = "text",
                     field: str = "calibration_dataset") -> tuple[list[str], str] | None:
    """The calibration texts of a local or ``s3://`` source (empty: the built-in set) and the sha256
    of their content, without a tokenizer: a chat row's ``messages`` become their contents joined
    by newlines. ``None`` for a hub dataset (it cannot be read offline: the leak check of user eval
    sets then says the calibration set was not checked)."""
    import hashlib

    source = (source or DEFAULT_CALIBRATION).strip()
    if source.startswith("s3://"):
        files = download_s3(source, Path(tempfile.mkdtemp(prefix="shipyard-calib-")), field)
    elif Path(source).expanduser().is_file():
        files = [Path(source).expanduser()]
    else:
        return None
    digest = hashlib.sha256()
    texts: list[str] = []
    for path in files:
        digest.update(path.read_bytes())
        for row in _read_rows(path, field):
            if isinstance(row.get(text_column), str):
                texts.append(row[text_column])
            elif isinstance(row.get("messages"), list):
                texts.append("\n".join(str(m.get("content", "")) for m in row["messages"] if isinstance(m, dict)))
    return texts, digest.hexdigest()


def _hub_dataset_size(name: str) -> int:
    """The bytes of the hub dataset ``name``'s files, as the hub lists them (every split's)."""
    from huggingface_hub import HfApi

    info = HfApi(token=os.environ.get("HF_TOKEN") or None).dataset_info(name, files_metadata=True)
    return sum(int(sibling.size or 0) for sibling in info.siblings or [])


def _load_hub_rows(name: str, field: str, num_samples: int, seed: int) -> list[dict[str, Any]]:
    """The rows of hub dataset ``name`` (``org/name[:split]``), loaded by ``datasets`` within
    ``SHIPYARD_HF_TIMEOUT_S`` plus its files' bytes at 256 KiB/s (the sizes the hub lists; the
    listing has ``SHIPYARD_HF_TIMEOUT_S`` of its own), the download threads ``datasets`` starts
    included, over plain HTTP (:func:`shipyard.models.hub.plain_http`); past it one line naming
    ``field`` and the setting (exit 3). Offline
    (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE``): from the local cache within the setting."""
    from shipyard.models.hub import ENV_TIMEOUT, HUB_SOCKETS, hf_timeout_s, plain_http

    base = hf_timeout_s()  # a bad setting is one line before anything is imported or contacted
    from datasets import load_dataset

    plain_http()  # the files over HTTP, in sockets the deadline shuts (not hf_xet's)

    dataset_name, _, split = name.partition(":")
    deadline = base

    def late() -> UnreachableError:
        return UnreachableError(field, f"hub dataset {dataset_name!r} did not load within {round(deadline, 1):g} s",
                                f"check the network (and HF_ENDPOINT), or raise {ENV_TIMEOUT} (seconds; the "
                                "dataset's files get 256 KiB/s on top), or use a local JSONL/Parquet file")

    try:
        if not (hub_offline() or os.environ.get("HF_DATASETS_OFFLINE", "").strip().lower() in TRUE):
            deadline = transfer_deadline(base, call_within(base, _hub_dataset_size, dataset_name, on_timeout=late,
                                                           owner=HUB_SOCKETS))
        ds = call_within(deadline, load_dataset, dataset_name, split=split or "train", on_timeout=late, owner=HUB_SOCKETS)
    except ShipyardError:
        raise
    except Exception as err:
        raise ShipyardError(
            field,
            f"cannot load hub dataset {dataset_name!r}: {type(err).__name__}".strip(),
            "the hub may be unreachable (offline mode): use a local JSONL/Parquet file or an s3:// object",
        ) from None
    ds = ds.shuffle(seed=seed).select(range(min(num_samples, len(ds))))
    return list(ds)
