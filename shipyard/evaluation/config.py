"""The eval config: one JSON string that fixes everything that changes a score.

Base and candidate are only comparable when they ran the same config, so the config is
normalised (defaults filled in, task folder replaced by a content hash) and hashed; the hash is
recorded with every result and the gate refuses to compare results whose hashes differ.

Pure Python (no lm-eval import): the base runtime can parse and hash configs too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir
from shipyard.core.jsonargs import json_object

SUITE_DIR = package_dir("shipyard.evaluation.suite")
SUITE_TAG = "shipyard_offline"
BACKENDS = ("hf", "openai")
# Keys that do not change a score and so stay out of the hash.
UNHASHED = ("cache", "log_samples")


@dataclass(frozen=True)
class EvalConfig:
    """A validated eval config (see README.md for each field)."""

    tasks: list[str] = field(default_factory=lambda: [SUITE_TAG])
    num_fewshot: int | None = None
    limit: int | float | None = None
    batch_size: int | str = 8
    apply_chat_template: bool = False
    seed: int = 1234
    gen_kwargs: dict[str, Any] = field(default_factory=dict)
    task_dir: str | None = None
    backend: str | None = None
    bootstrap_iters: int = 1000
    log_samples: bool = True  # per-sample logs: the paired statistics of the accuracy gate
    cache: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data."""
        return asdict(self)

    def with_backend(self, backend: str) -> EvalConfig:
        """This config run by ``backend``; a config that names another backend is refused."""
        if backend not in BACKENDS:
            raise ShipyardError("eval_config.backend", f"unknown backend {backend!r}", f"use one of {list(BACKENDS)}")
        if self.backend not in (None, backend):
            raise ShipyardError(
                "eval_config.backend",
                f"the config asks for backend {self.backend!r} but this step runs {backend!r}",
                f"drop 'backend' from the config or use the evaluate step of backend {self.backend!r}",
            )
        data = self.to_dict()
        data["backend"] = backend
        return EvalConfig(**data)

    def task_dirs(self) -> list[Path]:
        """Folders of task YAMLs: the offline suite, then the user's ``task_dir`` (which wins on clashes)."""
        dirs = [SUITE_DIR]
        if self.task_dir:
            dirs.append(Path(self.task_dir).expanduser().resolve())
        return dirs

    def hashed_view(self) -> dict[str, Any]:
        """What the hash covers: every score-relevant field, task folders by content."""
        data = {k: v for k, v in self.to_dict().items() if k not in UNHASHED}
        data["task_dir"] = tree_sha256(Path(self.task_dir).expanduser()) if self.task_dir else None
        data["suite"] = tree_sha256(SUITE_DIR)
        return data

    def config_hash(self, lm_eval_version: str | None = None) -> str:
        """Canonical SHA-256 of :meth:`hashed_view` (plus the harness version when given)."""
        data = self.hashed_view()
        data["lm_eval_version"] = lm_eval_version
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()


def tree_sha256(root: Path, suffixes: tuple[str, ...] | None = None) -> str:
    """Content hash of a folder: relative paths and bytes of its regular files, in sorted order."""
    digest = hashlib.sha256()
    root = Path(root)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if suffixes and path.suffix not in suffixes:
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _bad(key: str, problem: str, fix: str) -> ShipyardError:
    return ShipyardError(f"eval_config.{key}", problem, fix)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_eval_config(text: str | dict[str, Any] | None) -> EvalConfig:
    """Parse and validate the ``eval_config`` JSON string (empty means all defaults)."""
    data = json_object(text, "eval_config", '{"tasks": ["shipyard_offline"], "limit": 20}')
    known = set(EvalConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ShipyardError("eval_config", f"unknown key(s) {unknown}", f"use only {sorted(known)}")

    tasks = data.get("tasks", [SUITE_TAG])
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise _bad("tasks", f"must be a non-empty list of task names, got {tasks!r}", 'e.g. ["shipyard_offline"] or ["hellaswag"]')
    data["tasks"] = [t.strip() for t in tasks]

    fewshot = data.get("num_fewshot")
    if fewshot is not None and (not _is_int(fewshot) or fewshot < 0):
        raise _bad("num_fewshot", f"must be a whole number >= 0, got {fewshot!r}", "use 0, 5, ... or leave it out")

    limit = data.get("limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            raise _bad("limit", f"must be a number, got {limit!r}", "use a count of items per task (e.g. 20) or leave it out")
        if limit <= 0:
            raise _bad("limit", f"must be > 0, got {limit!r}", "use a count of items per task (e.g. 20) or leave it out for all")
        if isinstance(limit, float) and limit >= 1:
            if limit != int(limit):
                raise _bad("limit", f"{limit!r} is neither a count nor a fraction below 1", "use e.g. 20 or 0.5")
            data["limit"] = int(limit)

    batch = data.get("batch_size", 8)
    if not ((_is_int(batch) and batch >= 1) or batch == "auto"):
        raise _bad("batch_size", f"must be a whole number >= 1 or 'auto', got {batch!r}", "use e.g. 8")

    for key in ("apply_chat_template", "log_samples", "cache"):
        if key in data and not isinstance(data[key], bool):
            raise _bad(key, f"must be true or false, got {data[key]!r}", "use a JSON boolean")

    seed = data.get("seed", 1234)
    if not _is_int(seed) or seed < 0:
        raise _bad("seed", f"must be a whole number >= 0, got {seed!r}", "use e.g. 1234")

    gen = data.get("gen_kwargs", {})
    if gen is None:
        data["gen_kwargs"] = gen = {}
    if not isinstance(gen, dict):
        raise _bad("gen_kwargs", f"must be a JSON object, got {gen!r}", 'e.g. {"max_gen_toks": 64, "temperature": 0}')

    boot = data.get("bootstrap_iters", 1000)
    if not _is_int(boot) or boot < 0:
        raise _bad("bootstrap_iters", f"must be a whole number >= 0, got {boot!r}", "use e.g. 1000 (0 skips bootstrap stderr)")

    backend = data.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise _bad("backend", f"unknown backend {backend!r}", f"use one of {list(BACKENDS)}")

    task_dir = data.get("task_dir")
    if task_dir is not None:
        if not isinstance(task_dir, str) or not task_dir.strip():
            raise _bad("task_dir", f"must be a folder path, got {task_dir!r}", "give a folder of lm-eval task YAMLs")
        path = Path(task_dir).expanduser()
        if not path.is_dir():
            raise _bad("task_dir", f"{path} is not a folder", "give a folder of lm-eval task YAMLs")
        data["task_dir"] = str(path.resolve())
    return EvalConfig(**data)
