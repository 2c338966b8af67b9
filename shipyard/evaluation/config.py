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
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir, path_kind
from shipyard.core.jsonargs import json_object, validation_error

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


#: bounds of the numbers (far above any real evaluation, far below what breaks lm-eval)
MAX_LIMIT = 10_000_000
MAX_SEED = 2**32 - 1
_EXAMPLE = '{"tasks": ["shipyard_offline"], "limit": 20}'


class _EvalModel(BaseModel):
    """The eval config as typed, strict input: no coercion (``"5"`` is not 5), no NaN/inf, bounds."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    tasks: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]] = Field(
        default_factory=lambda: [SUITE_TAG], min_length=1, max_length=200)
    num_fewshot: int | None = None
    limit: int | float | None = None
    batch_size: int | Literal["auto"] = 8
    apply_chat_template: bool = False
    seed: int = Field(default=1234, ge=0, le=MAX_SEED)
    gen_kwargs: dict[str, Any] | None = None
    task_dir: str | None = None
    backend: str | None = None
    bootstrap_iters: int = Field(default=1000, ge=0, le=1_000_000)
    log_samples: bool = True
    cache: bool = True

    @field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, value: Any) -> Any:
        if isinstance(value, str):  # "a,b" is a list of two
            value = [t.strip() for t in value.split(",") if t.strip()]
        if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
            raise ValueError(f"must be a non-empty list of task names, got {value!r}"[:200]
                             + '|e.g. ["shipyard_offline"] or ["hellaswag"]')
        return value

    @field_validator("num_fewshot")
    @classmethod
    def _fewshot(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= 1000:
            raise ValueError(f"must be a whole number >= 0 (at most 1000), got {value!r}|use 0, 5, ... or leave it out")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str | None) -> str | None:
        if value is not None and value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}"[:120] + f"|use one of {list(BACKENDS)}")
        return value

    @field_validator("limit")
    @classmethod
    def _limit(cls, value: int | float | None) -> int | float | None:
        if value is None:
            return None
        if value <= 0:
            raise ValueError(f"must be > 0, got {value!r}|use a count of items per task (e.g. 20) or leave it out "
                             "for all")
        if value > MAX_LIMIT:
            raise ValueError(f"must be at most {MAX_LIMIT}, got {value!r}|use a count of items per task (e.g. 20)")
        if isinstance(value, float) and value >= 1:
            if value != int(value):
                raise ValueError(f"{value!r} is neither a count nor a fraction below 1|use e.g. 20 or 0.5")
            return int(value)
        return value

    @field_validator("batch_size")
    @classmethod
    def _batch(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 4096:
            raise ValueError(f"must be a whole number from 1 to 4096 or 'auto', got {value!r}|use e.g. 8")
        return value

    @field_validator("task_dir")
    @classmethod
    def _task_dir(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError(f"must be a folder path, got {value!r}|give a folder of lm-eval task YAMLs")
        path = Path(value).expanduser()
        if path_kind(value) != "dir":
            raise ValueError(f"{path} is not a folder|give a folder of lm-eval task YAMLs")
        return str(path.resolve())


def parse_eval_config(text: str | dict[str, Any] | None) -> EvalConfig:
    """Parse and validate the ``eval_config`` JSON string (empty means all defaults): a strict
    pydantic model (types, bounds, no NaN/inf, no unknown keys); the first problem is one line
    naming the field path (``eval_config.limit``) and the fix."""
    data = json_object(text, "eval_config", _EXAMPLE)
    try:
        model = _EvalModel.model_validate(data)
    except ValidationError as err:
        raise validation_error("eval_config", err, _EXAMPLE) from None
    values = model.model_dump()
    values["gen_kwargs"] = values["gen_kwargs"] or {}
    return EvalConfig(**values)
