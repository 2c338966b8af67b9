"""Eval result cache: one entry per (model content, eval config).

The pipeline evaluates the base model once per config: the key is the model's tree digest
(:func:`model_identity`) plus the eval config hash, the entry a finished results folder under
``<shipyard cache>/eval/<key>/``. In the cluster KFP's own step cache plays this role; the same
key makes local runs reuse the base result. Pure Python (hashlib only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from shipyard.core.files import cache_dir, copy_tree, tree_digest, tree_files

SUMMARY = "summary.json"


def model_identity(model_dir: str | Path) -> dict[str, Any]:
    """Content identity of a model folder: the one tree digest (:func:`shipyard.core.files.tree_digest`,
    hex without the ``sha256:`` prefix), the same the modelcar's ``io.shipyard.model.digest`` names."""
    files = tree_files(model_dir)
    digest, _ = tree_digest(files)
    return {"sha256": digest.removeprefix("sha256:"), "files": len(files), "bytes": sum(p.stat().st_size for _, p in files)}


def eval_cache_root() -> Path:
    """``<shipyard cache>/eval``."""
    return cache_dir() / "eval"


def cache_key(model_sha256: str, config_hash: str) -> str:
    """The entry name for a model and a config."""
    return f"{model_sha256[:24]}-{config_hash[:24]}"


def lookup(key: str) -> Path | None:
    """The cached results folder for ``key`` if a complete one exists."""
    entry = eval_cache_root() / key
    try:
        json.loads((entry / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    return entry


def store(key: str, results_dir: Path) -> Path:
    """Copy a finished results folder into the cache (atomically; last writer wins)."""
    entry = eval_cache_root() / key
    copy_tree(results_dir, entry)
    return entry


def restore_into(entry: Path, dest: Path) -> None:
    """Copy a cached results folder's files into the (empty, temporary) folder ``dest``."""
    shutil.copytree(entry, dest, dirs_exist_ok=True)
