"""Eval result cache: one entry per (model content, eval config).

The pipeline evaluates the base model once per config: the key is the SHA-256 of the model
folder's files plus the eval config hash, the entry a finished results folder under
``<shipyard cache>/eval/<key>/``. In the cluster KFP's own step cache plays this role; the same
key makes local runs reuse the base result. Pure Python (hashlib only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from shipyard.core.files import cache_dir, copy_tree, sha256_file

SUMMARY = "summary.json"


def model_identity(model_dir: str | Path) -> dict[str, Any]:
    """Content identity of a model folder: SHA-256 over its files' relative paths and hashes."""
    import hashlib

    root = Path(model_dir)
    digest = hashlib.sha256()
    files = 0
    size = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):  # .cache/, .gitattributes and the like
            continue
        digest.update(f"{rel}\0{sha256_file(path)}\n".encode())
        files += 1
        size += path.stat().st_size
    return {"sha256": digest.hexdigest(), "files": files, "bytes": size}


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
