"""Bad input at the command line: one table, one row per real mistake.

Each row runs the real ``shipyard`` CLI in a subprocess and asserts what a user sees: exactly one
line on stderr starting with ``shipyard: error:``, naming the field; no traceback (the CLI's
catch-all for bugs is switched off with ``SHIPYARD_DEBUG=1``, so a bug shows as a traceback
and fails the row); the documented exit code; nothing left behind in the working folder (which
holds every out/work dir the rows name); no secret echoed; and pipeline-parameter rows rejected
in under 10 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DIGEST = "sha256:" + "a" * 64
URI = f"oci://quay.io/org/model@{DIGEST}"
DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens
SECRET = "hunter2pw"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
#: a random-looking token pasted where a name belongs (mixed case and digits, like most API tokens)
TOKEN_LIKE = "Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc"
#: every credential a row plants; none may appear in any output of any row
SECRETS = (SECRET, AWS_KEY_ID, "p@" + SECRET, SECRET + "/x", TOKEN_LIKE)
BOMB = ('{a: &a [x, x, x, x, x, x, x, x, x], b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a], '
        'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b], d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c], '
        'e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d], f: [*e, *e, *e, *e, *e, *e, *e, *e, *e]}')
#: the longest error line a row may print (a 10 MB value must not become a 10 MB line)
MAX_LINE = 1100
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


@dataclass(frozen=True)
class Row:
    """One bad input: the arguments, what the error line must contain, the exit code."""

    id: str
    argv: tuple[str, ...]
    field: str
    code: int = 2
    params: bool = False  # a pipeline-parameter row: rejected before any step starts
    needs: frozenset[str] = field(default_factory=frozenset)  # "ro" / "full" mounts


def row(id: str, *argv: str, field: str, code: int = 2, params: bool = False, needs: str = "") -> Row:
    return Row(id, argv, field, code, params, frozenset(needs.split()) if needs else frozenset())


def verify(*args: str, url: str = DEAD, candidate: str = "golden.json") -> tuple[str, ...]:
    return ("verify", "--url", url, "--served-model-name", "llm", "--candidate", candidate, *args)


def watch(*args: str, prometheus: str = DEAD, champion: str = "candidate.json") -> tuple[str, ...]:
    return ("watch", "--prometheus", prometheus, "--model-name", "llm", "--champion", champion, *args)


def watch_model(*args: str, model: str = URI) -> tuple[str, ...]:
    return ("watch", "--prometheus", DEAD, "--model-name", "llm", "--model", model, *args)


#: the watch pipeline's required parameter, so that rows about its other parameters reach them
PROMETHEUS = ("--param", "prometheus_url=http://prometheus-operated.monitoring:9090")


def run_local(*args: str) -> tuple[str, ...]:
    return ("run", "--local", "--work-dir", "work", *args)


def eval_sets(uri: str, form: str = "qa", **spec: object) -> str:
    """``eval_sets=...`` with one set ``s`` (``max_leak_share`` goes to the top level)."""
    leak = spec.pop("max_leak_share", None)
    sets = [{"name": "s", "form": form, "uri": uri, **spec}]
    return "eval_sets=" + json.dumps({"sets": sets, "max_leak_share": leak} if leak is not None else sets)


def judge_cap(**cap: object) -> str:
    """``eval_sets=...`` with no set and the shipped judge with one cap on its calls."""
    return "eval_sets=" + json.dumps({"sets": [], "judge": {"model_uri": "embedded://smollm2-135m-instruct", **cap}})


#: a registry, so that rows about other things pass the "registry empty while dry_run is false" check
REGISTRY = ("--param", "registry=quay.io")


def submit(*args: str, pipeline: str = "optimize-and-deploy") -> tuple[str, ...]:
    return ("submit", pipeline, "--host", DEAD, *(REGISTRY if pipeline not in ("promote", "watch") else ()), *args)


def schedule(*args: str) -> tuple[str, ...]:
    return ("schedule", "requantize", "--host", DEAD, *REGISTRY, *args)


def deploy(*args: str, uri: str = URI) -> tuple[str, ...]:
    return ("deploy", "--dry-run", "--name", "llm", "--model-uri", uri, *args)


def workload(trace: str, *args: str, block: str = "16") -> tuple[str, ...]:
    return ("workload", "fingerprint", trace, "--format", "mooncake", "--block-size", block, *args)


ROWS: list[Row] = [
    # --- plan: numbers, files, output flags ------------------------------------------------------
    row("plan-gpu-mem-inf", "plan", "config.json", "--gpu-memory-gib", "inf", field="--gpu-memory-gib"),
    row("plan-gpu-mem-nan", "plan", "config.json", "--gpu-memory-gib", "nan", field="--gpu-memory-gib"),
    row("plan-gpu-mem-negative", "plan", "config.json", "--gpu-memory-gib", "-1", field="--gpu-memory-gib"),
    row("plan-gpu-mem-zero", "plan", "config.json", "--gpu-memory-gib", "0", field="--gpu-memory-gib"),
    row("plan-gpu-mem-text", "plan", "config.json", "--gpu-memory-gib", "80GiB", field="--gpu-memory-gib"),
    row("plan-gpu-mem-overflow", "plan", "config.json", "--gpu-memory-gib", "1e400", field="--gpu-memory-gib"),
    row("plan-gpu-count-zero", "plan", "config.json", "--gpu-count", "0", field="--gpu-count"),
    row("plan-gpu-count-fraction", "plan", "config.json", "--gpu-count", "1.5", field="--gpu-count"),
    row("plan-util-above-1", "plan", "config.json", "--gpu-memory-utilization", "1.5", field="--gpu-memory-utilization"),
    row("plan-util-zero", "plan", "config.json", "--gpu-memory-utilization", "0", field="--gpu-memory-utilization"),
    row("plan-util-nan", "plan", "config.json", "--gpu-memory-utilization", "nan", field="--gpu-memory-utilization"),
    row("plan-max-model-len-negative", "plan", "config.json", "--max-model-len", "-5", field="--max-model-len"),
    row("plan-max-num-seqs-zero", "plan", "config.json", "--max-num-seqs", "0", field="--max-num-seqs"),
    row("plan-batched-tokens-zero", "plan", "config.json", "--max-num-batched-tokens", "0",
        field="--max-num-batched-tokens"),
    row("plan-concurrency-zero", "plan", "config.json", "--concurrency", "0", field="--concurrency"),
    row("plan-tp-above-gpus", "plan", "config.json", "--tensor-parallel-size", "4", "--gpu-count", "2",
        field="tensor_parallel_size"),
    row("plan-kv-dtype", "plan", "config.json", "--kv-cache-dtype", "int4", field="--kv-cache-dtype"),
    row("plan-dtype", "plan", "config.json", "--dtype", "int3", field="dtype"),
    row("plan-missing-model", "plan", "missing.json", field="model: "),
    row("plan-hub-id-not-cached", "plan", "hf://no-such-org/no-such-model", field="MODEL: no-such-org/no-such-model is "
        "not in the local Hugging Face cache"),
    row("plan-empty-folder", "plan", "emptydir", field="model: "),
    row("plan-bad-json", "plan", "bad.json", field="not valid JSON"),
    row("plan-json-list", "plan", "list.json", field="not a JSON object"),
    row("plan-no-hidden-size", "plan", "noarch.json", field="hidden_size"),
    row("plan-no-model-arg", "plan", field="MODEL"),
    row("plan-unknown-flag", "plan", "config.json", "--bogus", field="--bogus"),
    row("plan-o-path", "plan", "config.json", "-o", "plan.json", field="--out-file plan.json"),
    row("plan-o-unknown-format", "plan", "config.json", "-o", "xml", field="-o/--output"),
    row("plan-out-file-readonly", "plan", "config.json", "--out-file", "ro/plan.json", field="--out-file", needs="ro"),
    row("plan-out-file-through-file", "plan", "config.json", "--out-file", "file.txt/plan.json", field="--out-file"),
    row("plan-out-file-is-folder", "plan", "config.json", "--out-file", "emptydir", field="--out-file"),
    row("plan-out-file-disk-full", "plan", "config.json", "--out-file", "full/plan.json", field="--out-file: no space left",
        needs="full"),
    # --- deploy: output flags, paths, URIs, numbers -----------------------------------------------
    row("deploy-o-path", *deploy("-o", "manifest.yaml"), field="--out-file manifest.yaml"),
    row("deploy-o-yaml-file-name", *deploy("-o", "out.yaml"), field="--out-file"),
    row("deploy-out-file-readonly", *deploy("--out-file", "ro/m.yaml"), field="--out-file", needs="ro"),
    row("deploy-out-file-through-file", *deploy("--out-file", "file.txt/m.yaml"), field="--out-file"),
    row("deploy-out-file-is-folder", *deploy("--out-file", "emptydir"), field="emptydir"),
    row("deploy-out-file-disk-full", *deploy("--out-file", "full/m.yaml"), field="--out-file: no space left",
        needs="full"),
    row("deploy-mutable-tag", *deploy(uri="oci://quay.io/org/model:v1"), field="mutable tag"),
    row("deploy-latest-tag", *deploy(uri="oci://quay.io/org/model"), field="mutable tag 'latest'"),
    row("deploy-bad-digest", *deploy(uri="oci://quay.io/org/model@sha256:abc"), field="model_uri"),
    row("deploy-empty-uri", *deploy(uri=""), field="model_uri"),
    row("deploy-unknown-scheme", *deploy(uri="ftp://host/model"), field="model_uri"),
    row("deploy-credentials-in-uri", *deploy(uri=f"oci://bob:{SECRET}@quay.io/org/model@{DIGEST}"),
        field="--model-uri: "),
    row("deploy-credentials-in-hf-uri", *deploy(uri=f"hf://bob:{SECRET}@org/model"), field="--model-uri: "),
    row("deploy-gpu-mem-inf", *deploy("--gpu-memory-gib", "inf"), field="--gpu-memory-gib"),
    row("deploy-tp-zero", *deploy("--tensor-parallel", "0"), field="--tensor-parallel"),
    row("deploy-gpus-zero", *deploy("--gpus", "0"), field="--gpus"),
    row("deploy-prefill-negative", *deploy("--prefill-replicas", "-1"), field="--prefill-replicas"),
    row("deploy-decode-text", *deploy("--decode-replicas", "two"), field="--decode-replicas"),
    row("deploy-wait-nan", *deploy("--wait-timeout", "nan"), field="--wait-timeout"),
    row("deploy-params-missing", *deploy("--params-file", "missing.yaml"), field="--params-file"),
    row("deploy-params-list", *deploy("--params-file", "list.yaml"), field="--params-file"),
    row("deploy-params-bad-yaml", *deploy("--params-file", "bad.yaml"), field="--params-file"),
    row("deploy-params-typo", *deploy("--params-file", "typo.yaml"), field="replicaz"),
    row("deploy-unknown-preset", *deploy("--preset", "nope"), field="preset"),
    row("deploy-template-missing", *deploy("--template", "missing.yaml"), field="--template"),
    row("deploy-template-folder", *deploy("--template", "emptydir"), field="--template"),
    row("deploy-template-list", *deploy("--template", "list.yaml"), field="deploy_config.template"),
    row("deploy-template-bad-yaml", *deploy("--template", "bad.yaml"), field="deploy_config.template"),
    row("deploy-template-not-llmisvc", *deploy("--template", "typo.yaml"), field="deploy_config.template"),
    row("deploy-template-unknown-field", *deploy("--template", "llmisvc-typo.yaml"), field="replicaz"),
    row("deploy-template-and-tp", *deploy("--template", "llmisvc.yaml", "--tensor-parallel", "2"),
        field="deploy_config.tensor_parallel"),
    row("deploy-template-no-name", "deploy", "--dry-run", "--model-uri", URI, "--template", "llmisvc-noname.yaml",
        field="name"),
    row("deploy-bad-name", "deploy", "--dry-run", "--name", "Bad_Name", "--model-uri", URI, field="name"),
    row("deploy-no-name", "deploy", "--dry-run", "--model-uri", URI, field="--name"),
    row("deploy-model-dir-missing", *deploy("--model-dir", "missing"), field="model: "),
    row("deploy-apply-without-out-file-unreachable", "deploy", "--name", "llm", "--model-uri", URI,
        "--kubeconfig", "kubeconfig", field="unreachable while trying to discover the API: connection refused", code=3),
    row("deploy-namespace-underscore", *deploy("-n", "team_a"), field="-n/--namespace: 'team_a' is not a Kubernetes "
        "namespace"),
    row("deploy-namespace-empty", *deploy("--namespace", ""), field="-n/--namespace: is empty"),
    row("deploy-namespace-path", *deploy("-n", "../kube-system"), field="-n/--namespace"),
    row("deploy-dry-run-unknown-mode", "deploy", "--dry-run=maybe", "--name", "llm", "--model-uri", URI,
        field="--dry-run: invalid choice: 'maybe'"),
    row("deploy-dry-run-server-unreachable", "deploy", "--dry-run=server", "--name", "llm", "--model-uri", URI,
        "--kubeconfig", "kubeconfig", field="unreachable while trying to discover the API: connection refused", code=3),
    row("deploy-dry-run-server-bad-kubeconfig", "deploy", "--dry-run=server", "--name", "llm", "--model-uri", URI,
        "--kubeconfig", "config.json", field="kubeconfig"),
    row("deploy-kubeconfig-missing", "deploy", "--name", "llm", "--model-uri", URI, "--out-file", "applied.yaml",
        "--kubeconfig", "missing-kubeconfig", field="kubeconfig"),
    row("deploy-kubeconfig-not-one", "deploy", "--name", "llm", "--model-uri", URI, "--out-file", "applied.yaml",
        "--kubeconfig", "config.json", field="kubeconfig"),
    row("deploy-kubeconfig-context", "deploy", "--name", "llm", "--model-uri", URI, "--out-file", "applied.yaml",
        "--kubeconfig", "kubeconfig", "--context", "nope", field="kubeconfig"),
    row("deploy-api-unreachable", "deploy", "--name", "llm", "--model-uri", URI, "--out-file", "applied.yaml",
        "--kubeconfig", "kubeconfig", field="unreachable", code=3),
    row("deploy-api-unreachable-keeps-old-file", "deploy", "--name", "llm", "--model-uri", URI,
        "--out-file", "list.yaml", "--kubeconfig", "kubeconfig", field="unreachable", code=3),
    # --- validate -----------------------------------------------------------------------------------
    row("validate-missing", "validate", "missing.yaml", field="missing.yaml"),
    row("validate-folder", "validate", "emptydir", field="emptydir"),
    row("validate-no-files", "validate", field="FILE"),
    row("validate-o-format", "validate", "-o", "report.json", "list.yaml", field="--out-file"),
    row("validate-f-empty-folder", "validate", "-f", "emptydir", field="emptydir: is a folder with no *.yaml"),
    row("validate-f-recursive-empty-folder", "validate", "-R", "-f", "emptydir", field="emptydir: is a folder"),
    row("validate-f-missing", "validate", "-f", "missing-dir", field="missing-dir: does not exist"),
    row("validate-f-no-value", "validate", "-f", field="-f/--filename"),
    # --- compile ------------------------------------------------------------------------------------
    row("compile-out-readonly", "compile", "--out", "ro/compiled", field="--out", needs="ro"),
    row("compile-out-is-file", "compile", "--out", "file.txt", field="--out"),
    row("compile-out-through-file", "compile", "--out", "file.txt/compiled", field="--out"),
    row("compile-out-disk-full", "compile", "--out", "full/compiled", "--pipeline", "promote", field="--out: no space left",
        needs="full"),
    row("compile-no-out", "compile", field="--out"),
    row("compile-unknown-pipeline", "compile", "--out", "compiled", "--pipeline", "nope", field="--pipeline"),
    row("compile-cluster-config-missing", "compile", "--out", "compiled", "--cluster-config", "missing.yaml",
        field="cluster_config"),
    # --- alias: refused before MLflow is asked -----------------------------------------------------
    row("alias-no-subcommand", "alias", field="alias: needs a subcommand"),
    row("alias-set-version-text", "alias", "set", "tiny", "production", "x", field="VERSION"),
    row("alias-set-version-zero", "alias", "set", "tiny", "production", "0", field="VERSION"),
    row("alias-set-version-fraction", "alias", "set", "tiny", "production", "1.5", field="VERSION"),
    # MLflow's registry stores an int32 version: a larger one made a real server fail (500s, retried 35 s, "cannot reach")
    row("alias-set-version-above-int32", "alias", "set", "tiny", "production", "2147483648", field="VERSION"),
    row("alias-set-version-26-digits", "alias", "set", "tiny", "production", "9" * 26, field="VERSION"),
    row("alias-set-reserved-version-alias", "alias", "set", "tiny", "v2", "1", field="ALIAS"),
    row("alias-set-latest", "alias", "set", "tiny", "latest", "1", field="ALIAS"),
    row("alias-set-blank-alias", "alias", "set", "tiny", " ", "1", field="ALIAS"),
    row("alias-set-missing-version", "alias", "set", "tiny", "production", field="VERSION"),
    row("alias-show-model-with-slash", "alias", "show", "org/tiny", field="MODEL"),
    row("alias-show-empty-model", "alias", "show", "", field="MODEL"),
    row("alias-rollback-no-model", "alias", "rollback", field="MODEL"),
    row("alias-show-o-path", "alias", "show", "tiny", "-o", "aliases.json", field="--out-file"),
    # --- run --local: pipeline parameters, checked before any work --------------------------------
    row("run-int-text", *run_local("--param", "num_calibration_samples=abc"), field="num_calibration_samples",
        params=True),
    row("run-int-fraction", *run_local("--param", "num_calibration_samples=1.5"), field="num_calibration_samples",
        params=True),
    row("run-int-bool", *run_local("--param", "max_seq_length=true"), field="max_seq_length", params=True),
    row("run-int-empty", *run_local("--param", "max_seq_length="), field="max_seq_length", params=True),
    row("run-int-overflow", *run_local("--param", "seed=1e400"), field="seed", params=True),
    row("run-float-text", *run_local("--param", "champion_tolerance=abc"), field="champion_tolerance", params=True),
    row("run-float-nan", *run_local("--param", "champion_tolerance=nan"), field="champion_tolerance", params=True),
    row("run-float-inf", *run_local("--param", "champion_tolerance=inf"), field="champion_tolerance", params=True),
    row("run-bool-text", *run_local("--param", "dry_run=maybe"), field="dry_run", params=True),
    row("run-bool-two", *run_local("--param", "dry_run=2"), field="dry_run", params=True),
    row("run-bool-typo", *run_local("--param", "insecure_registry=yess"), field="insecure_registry", params=True),
    row("run-list-empty", *run_local("--param", "recipes="), field="recipes", params=True),
    row("run-list-unclosed", *run_local("--param", "recipes=[w8a8-int8"), field="recipes", params=True),
    row("run-unknown-param", *run_local("--param", "no_such_param=1"), field="--param: unknown parameter(s) no_such_param",
        params=True),
    row("run-param-no-equals", *run_local("--param", "novalue"), field="--param", params=True),
    row("run-param-no-key", *run_local("--param", "=5"), field="--param", params=True),
    row("run-model-uri-tag", *run_local("--param", "model_uri=oci://quay.io/org/m:v1"), field="model_uri", params=True),
    row("run-model-uri-latest", *run_local("--param", "model_uri=oci://quay.io/org/m"), field="'latest'", params=True),
    row("run-model-uri-bad-digest", *run_local("--param", "model_uri=oci://quay.io/org/m@sha256:abc"),
        field="model_uri", params=True),
    row("run-model-uri-scheme", *run_local("--param", "model_uri=ftp://host/m"), field="model_uri", params=True),
    row("run-model-uri-empty", *run_local("--param", "model_uri="), field="model_uri", params=True),
    row("run-safety-unknown-probe", *run_local("--param", 'safety={"probes": ["lmrc.Profanity"]}'),
        field="safety.probes", params=True),
    row("run-safety-probes-not-list", *run_local("--param", 'safety={"probes": 5}'), field="safety.probes", params=True),
    row("run-safety-tolerance", *run_local("--param", 'safety={"tolerance": 2}'), field="safety.tolerance", params=True),
    row("run-safety-max-prompts", *run_local("--param", 'safety={"max_prompts": 0}'), field="safety.max_prompts",
        params=True),
    row("run-safety-require", *run_local("--param", 'safety={"require": "yes"}'), field="safety.require", params=True),
    row("run-safety-min-attempts", *run_local("--param", 'safety={"min_attempts": 0}'), field="safety.min_attempts",
        params=True),
    row("run-safety-allow-inconclusive", *run_local("--param", 'safety={"allow_inconclusive": "yes"}'),
        field="safety.allow_inconclusive", params=True),
    row("run-safety-family", *run_local("--param", 'safety={"family_tolerance": {"lmrc": 0.1}}'),
        field="safety.family_tolerance", params=True),
    row("run-safety-unknown-key", *run_local("--param", 'safety={"probe": []}'), field="safety", params=True),
    row("run-safety-not-json", *run_local("--param", "safety=[1, 2"), field="safety", params=True),
    row("run-model-uri-credentials", *run_local("--param", f"model_uri=s3://key:{SECRET}@bucket/model"),
        field="model_uri", params=True),
    row("run-registry-credentials", *run_local("--param", f"registry=bob:{SECRET}@quay.io"), field="registry",
        params=True),
    row("run-registry-url-credentials", *run_local("--param", f"registry=https://bob:{SECRET}@quay.io"),
        field="registry", params=True),
    row("run-registry-with-path", *run_local("--param", "registry=quay.io/org"), field="registry", params=True),
    row("run-registry-empty-no-dry-run", *run_local("--param", "dry_run=false"), field="registry: is empty while "
        "dry_run is false", params=True),
    row("run-promote-no-candidate", "run", "--local", "promote", "--work-dir", "work", field="candidate_uri",
        params=True),
    row("run-promote-candidate-tag", "run", "--local", "promote", "--work-dir", "work",
        "--param", "candidate_uri=oci://quay.io/org/m:v2", field="candidate_uri", params=True),
    row("run-unknown-pipeline", "run", "--local", "nope", "--work-dir", "work", field="pipeline", params=True),
    row("run-params-file-missing", *run_local("--params-file", "missing.yaml"), field="--params-file", params=True),
    row("run-params-file-list", *run_local("--params-file", "list.yaml"), field="--params-file", params=True),
    row("run-params-file-bad-yaml", *run_local("--params-file", "bad.yaml"), field="--params-file", params=True),
    row("run-params-file-folder", *run_local("--params-file", "emptydir"), field="emptydir", params=True),
    # a pipe has no end until its writer closes it (none here): refused before it is opened, not waited on
    row("run-params-file-fifo", *run_local("--params-file", "fifo.yaml"), field="--params-file: fifo.yaml is not a "
        "regular file", params=True),
    row("run-params-file-too-big", *run_local("--params-file", "big.yaml"), field="--params-file: big.yaml holds 9 MiB",
        params=True),
    row("validate-fifo", "validate", "fifo.yaml", field="fifo.yaml is not a regular file"),
    row("run-params-file-int-text", *run_local("--params-file", "seed-text.yaml"), field="seed", params=True),
    row("run-params-file-int-list", *run_local("--params-file", "samples-list.yaml"), field="num_calibration_samples",
        params=True),
    row("run-params-file-null", *run_local("--params-file", "null.yaml"), field="dry_run", params=True),
    row("run-params-file-list-mapping", *run_local("--params-file", "recipes-mapping.yaml"), field="recipes",
        params=True),
    row("run-work-dir-readonly", "run", "--local", "--work-dir", "ro/work", field="--work-dir", needs="ro"),
    row("run-work-dir-is-file", "run", "--local", "--work-dir", "file.txt", field="--work-dir"),
    row("run-work-dir-through-file", "run", "--local", "--work-dir", "file.txt/work", field="--work-dir"),
    row("run-without-local", "run", "--work-dir", "work", field="--local"),
    row("run-unknown-runner", *run_local("--runner", "docker"), field="--runner"),
    # --- submit / schedule: bad parameters fail before the (dead) host is contacted -----------------
    row("submit-int-text", *submit("--param", "num_calibration_samples=abc"), field="num_calibration_samples",
        params=True),
    row("submit-unknown-param", *submit("--param", "replicaz=2"), field="--param: unknown", params=True),
    row("submit-bool-text", *submit("--param", "dry_run=maybe"), field="dry_run", params=True),
    row("submit-list-unclosed", *submit("--param", "recipes=[w4a16"), field="recipes", params=True),
    row("submit-promote-no-candidate", *submit(pipeline="promote"), field="candidate_uri", params=True),
    # --- the watch pipeline (issue 38): production against its model's signed envelope --------------
    row("submit-watch-no-prometheus", *submit(pipeline="watch"), field="prometheus_url", params=True),
    row("submit-watch-prometheus-not-http", *submit("--param", "prometheus_url=prometheus:9090", pipeline="watch"),
        field="prometheus_url: 'prometheus:9090' is not an http(s) URL", params=True),
    row("submit-watch-prometheus-credentials",
        *submit("--param", f"prometheus_url=http://admin:{SECRET}@prom:9090", pipeline="watch"),
        field="prometheus_url", params=True),
    row("submit-watch-model-by-tag", *submit(*PROMETHEUS, "--param", "served_model_uri=oci://quay.io/org/model:latest",
                                             pipeline="watch"), field="served_model_uri", params=True),
    row("submit-watch-model-not-a-modelcar", *submit(*PROMETHEUS, "--param", "served_model_uri=hf://org/model",
                                                     pipeline="watch"),
        field="served_model_uri: 'hf://org/model' is not a modelcar", params=True),
    row("submit-watch-window-too-short", *submit(*PROMETHEUS, "--param", 'watch_config={"window": "30s"}',
                                                 pipeline="watch"),
        field="watch_config.window: 30 s is shorter than two scrape intervals", params=True),
    row("submit-watch-config-unknown-key", *submit(*PROMETHEUS, "--param", 'watch_config={"windows": "1h"}',
                                                   pipeline="watch"),
        field="watch_config.windows: is not a setting", params=True),
    row("submit-watch-tolerance-negative", *submit(*PROMETHEUS, "--param",
                                                   'watch_config={"tolerance": {"ttft": -1}}', pipeline="watch"),
        field="watch_config.tolerance.ttft", params=True),
    row("submit-watch-tolerance-distribution-negative",
        *submit(*PROMETHEUS, "--param", 'watch_config={"tolerance": {"output_distribution": -0.1}}', pipeline="watch"),
        field="watch_config.tolerance.output_distribution", params=True),
    row("submit-watch-tolerance-prefix-cache-not-a-number",
        *submit(*PROMETHEUS, "--param", 'watch_config={"tolerance": {"prefix_cache": "high"}}', pipeline="watch"),
        field="watch_config.tolerance.prefix_cache: must be a finite number", params=True),
    row("submit-registry-credentials", *submit("--param", f"registry=bob:{SECRET}@quay.io"), field="registry",
        params=True),
    row("submit-registry-empty-no-dry-run", "submit", "optimize-and-deploy", "--host", DEAD,
        field="registry: is empty while dry_run is false", params=True),
    row("schedule-registry-empty-no-dry-run", "schedule", "requantize", "--host", DEAD, "--cron", "@daily",
        "--param", "registry=", field="registry: is empty while dry_run is false", params=True),
    # --- check: its own options, refused before the cluster is contacted ---------------------------
    row("check-unknown-layout", "check", "--layout", "nope", field="layout"),
    # the container rehearsal checks its layout and parameters before it writes its pipeline root
    row("run-container-unknown-layout", *run_local("--runner", "container", "--layout", "nope"), field="layout"),
    row("run-container-bad-param", *run_local("--runner", "container", "--param", "seed=abc"), field="seed"),
    row("check-cluster-config-missing", "check", "--cluster-config", "missing.yaml", field="cluster_config"),
    row("check-deploy-config-bad", "check", "--deploy-config", '{"replicaz": 2}', field="deploy_config.replicaz"),
    row("check-kubeconfig-missing", "check", "--kubeconfig", "missing.yaml", field="kubeconfig"),
    # --- round 3 classes 5 and 7 (issue 34): answers the tool should expect, values the consumer refuses ----
    row("check-kubeconfig-not-yaml", "check", "--kubeconfig", "kubeconfig-not-yaml", field="kubeconfig: "),
    row("check-kubeconfig-a-list", "check", "--kubeconfig", "kubeconfig-a-list", field="kubeconfig: "),
    row("check-kubeconfig-fifo", "check", "--kubeconfig", "fifo.yaml", field="kubeconfig: "),
    row("alias-show-ftp-tracking-uri", "alias", "show", "tiny", "--tracking-uri", "ftp://example.com/x",
        field="tracking_uri: ftp:// is not an MLflow tracking URI"),
    row("alias-set-slash-alias", "alias", "set", "tiny", "prod/eu", "1", field="ALIAS: 'prod/eu' is not a usable alias"),
    row("deploy-probe-period-above-int32", *deploy("--params-file", "probe-period-int32.yaml"),
        field="deploy_config.probes.readiness.period_seconds"),
    row("deploy-probe-startup-above-int32", *deploy("--params-file", "probe-startup-int32.yaml"),
        field="deploy_config.probes.startup_seconds"),
    # Kubernetes' own rules for quantities and names: a negative or unbounded quantity written as text, a
    # ServiceAccount or pull Secret name over 253 characters (the API server refuses them at apply)
    row("deploy-cpu-limit-negative-text", *deploy("--params-file", "cpu-negative.yaml"),
        field="deploy_config.resources.limits.cpu: '-4' is not a resource quantity"),
    row("deploy-memory-request-1e400", *deploy("--params-file", "memory-1e400.yaml"),
        field="deploy_config.resources.requests.memory: '1e400' is not a resource quantity"),
    row("run-deploy-config-cpu-negative-text", *run_local("--param", 'deploy_config={"resources": {"requests": '
                                                          '{"cpu": "-500m"}}}'),
        field="deploy_config.resources.requests.cpu: '-500m' is not a resource quantity", params=True),
    row("deploy-service-account-too-long", *deploy("--params-file", "sa-too-long.yaml"),
        field="deploy_config.service_account"),
    row("run-deploy-config-pull-secret-too-long", *run_local("--param", 'deploy_config={"image_pull_secrets": '
                                                             f'["{"a" * 254}"]}}'),
        field="deploy_config.image_pull_secrets", params=True),
    row("run-tuning-unknown-kv-cache-dtype", *run_local("--param", 'tuning={"space": {"kv_cache_dtype": ["fp3"]}}'),
        field="tuning.space.kv_cache_dtype: 'fp3' is not a valid value", params=True),
    # the search's size, from the product of the settings' value counts (no point is listed): a million-point
    # space whatever the strategy, a grid over its own max_points (refused before, only in the benchmark step)
    row("run-tuning-million-points", *run_local("--param", "tuning=" + json.dumps({"space": {
        "max_num_seqs": list(range(1, 101)), "max_num_batched_tokens": list(range(1, 101)),
        "tensor_parallel": list(range(1, 101))}, "strategy": "budgeted"})),
        field="tuning.space: has 1000000 points (100 max_num_seqs x 100 max_num_batched_tokens x 100 "
              "tensor_parallel)", params=True),
    row("run-tuning-grid-over-max-points", *run_local("--param", 'tuning={"space": {"max_num_seqs": [1, 2, 4], '
                                                      '"enable_prefix_caching": [true, false]}, "max_points": 4}'),
        field="tuning.max_points: the grid has 6 points, more than max_points 4", params=True),
    row("submit-tuning-grid-over-default-max-points", *submit("--param", "tuning=" + json.dumps({"space": {
        "max_num_seqs": [1, 2, 4], "max_num_batched_tokens": [512, 1024, 2048]}})),
        field="tuning.max_points: the grid has 9 points, more than max_points 8", params=True),
    # vLLM flags shipyard sets itself, in every spelling vLLM reads (shipyard.serving.vllm_flags): a short alias,
    # --flag=value, an abbreviation, a JSON flag's key; refused at pre-flight, not at render after the GPU work
    row("deploy-vllm-args-tp-alias", *deploy("--params-file", "vllm-tp-alias.yaml"),
        field="deploy_config.vllm_args: '-tp' is vLLM's --tensor-parallel-size, which is set by the deployment itself"),
    row("deploy-vllm-args-port-equals", *deploy("--params-file", "vllm-port-equals.yaml"),
        field="deploy_config.vllm_args: '--port=8000' is vLLM's --port"),
    row("deploy-decode-vllm-args-pp-alias", *deploy("--params-file", "vllm-decode-pp.yaml"),
        field="deploy_config.decode.vllm_args: '-pp' is vLLM's --pipeline-parallel-size"),
    row("run-deploy-config-vllm-args-long-tp", *run_local("--param", 'deploy_config={"vllm_args": '
                                                          '{"tensor-parallel-size": 2}}'),
        field="deploy_config.vllm_args: --tensor-parallel-size is set by the deployment itself", params=True),
    row("run-deploy-config-vllm-args-dp-alias", *run_local("--param", 'deploy_config={"vllm_args": {"-dp": 2}}'),
        field="deploy_config.vllm_args: '-dp' is vLLM's --data-parallel-size", params=True),
    row("run-deploy-config-vllm-args-kv-transfer-key", *run_local(
        "--param", 'deploy_config={"vllm_args": {"--kv-transfer-config.kv_role": "kv_both"}}'),
        field="deploy_config.vllm_args: '--kv-transfer-config.kv_role' is vLLM's --kv-transfer-config", params=True),
    row("submit-deploy-config-vllm-args-abbreviated-tp", *submit("--param", 'deploy_config={"vllm_args": '
                                                                 '{"tensor-parallel": 2}}'),
        field="deploy_config.vllm_args: 'tensor-parallel' is vLLM's --tensor-parallel-size", params=True),
    # vLLM's own parser's rules, from the table shipyard.serving.vllm_cli ships (issue 34, class 7)
    row("run-deploy-config-vllm-args-unknown-flag", *run_local("--param", 'deploy_config={"vllm_args": {"frobnicate": 1}}'),
        field="deploy_config.vllm_args: '--frobnicate' is not a flag of vLLM 0.32", params=True),
    row("run-deploy-config-vllm-args-bad-choice", *run_local(
        "--param", 'deploy_config={"vllm_args": {"kv-cache-dtype": "fp9"}}'),
        field="deploy_config.vllm_args: --kv-cache-dtype 'fp9' is not one of vLLM 0.32", params=True),
    row("deploy-decode-vllm-args-ambiguous", *deploy("--params-file", "vllm-decode-max-num.yaml"),
        field="deploy_config.decode.vllm_args: '--max-num' is ambiguous in vLLM 0.32"),
    row("run-bench-vllm-args-no-value", *run_local("--param", 'benchmark_config={"vllm_args": ["--max-model-len"]}'),
        field="benchmark_config.vllm_args: --max-model-len needs a value in vLLM 0.32", params=True),
    row("run-bench-vllm-args-value-to-a-switch", *run_local(
        "--param", 'benchmark_config={"vllm_args": ["--enforce-eager", "true"]}'),
        field="benchmark_config.vllm_args: 'true' is neither a flag of vLLM 0.32", params=True),
    row("run-tuning-vllm-args-removed-flag", *run_local(
        "--param", 'tuning={"space": {"vllm_args": {"old": ["--swap-space", "4"], "default": []}}}'),
        field="tuning.space.vllm_args.old: '--swap-space' is not a flag of vLLM 0.32", params=True),
    row("run-bench-vllm-args-port", *run_local("--param", 'benchmark_config={"vllm_args": ["--port", "9000"]}'),
        field="benchmark_config.vllm_args: --port is set by shipyard's vLLM server itself", params=True),
    row("run-bench-vllm-args-served-name-equals", *run_local(
        "--param", 'benchmark_config={"vllm_args": ["--served_model_name=x"]}'),
        field="benchmark_config.vllm_args: '--served_model_name=x' is vLLM's --served-model-name", params=True),
    row("run-bench-vllm-args-tp-alias", *run_local("--param", 'benchmark_config={"vllm_args": ["-tp", "2"]}'),
        field="benchmark_config.vllm_args: '-tp' is vLLM's --tensor-parallel-size, which the memory planner adds",
        params=True),
    row("run-tuning-flag-set-tp-alias", *run_local("--param", 'tuning={"space": {"vllm_args": {"tp2": ["-tp", "2"]}}}'),
        field="tuning.space.vllm_args.tp2: '-tp' is vLLM's --tensor-parallel-size", params=True),
    row("run-tuning-flag-set-port", *run_local("--param", 'tuning={"space": {"vllm_args": {"p": ["--port=1"]}}}'),
        field="tuning.space.vllm_args.p: '--port=1' is vLLM's --port", params=True),
    row("check-namespace-uppercase", "check", "-n", "Team-A", field="-n/--namespace: 'Team-A' is not a Kubernetes"),
    row("check-namespace-too-long", "check", "--namespace", "a" * 64, field="-n/--namespace"),
    row("check-namespace-slash", "check", "-n", "kubeflow/secrets", field="-n/--namespace"),
    row("check-kserve-namespace-path", "check", "--kserve-namespace", "kserve/../kube-system",
        field="--kserve-namespace: 'kserve/../kube-system' is not a Kubernetes namespace"),
    # --- round 3 class 6 (issue 34): every name check puts into an API path, checked before any request ------
    row("check-namespace-percent-encoded", "check", "-n", "kubeflow%2Fsecrets", field="-n/--namespace"),
    row("check-namespace-dot-dot", "check", "-n", "..", field="-n/--namespace: '..' is not a Kubernetes namespace"),
    row("check-kserve-namespace-query", "check", "--kserve-namespace", "kserve?watch=1", field="--kserve-namespace"),
    row("check-layout-namespace-slash", "check", "--cluster-config", "cluster-ns-slash.yaml",
        field="cluster_config layouts.l.pipeline_namespace: 'kubeflow/secrets' is not a Kubernetes namespace"),
    row("check-layout-serving-namespace-query", "check", "--cluster-config", "cluster-ns-query.yaml",
        field="cluster_config layouts.l.serving_namespace"),
    row("check-other-layout-namespace-dot-dot", "check", "--cluster-config", "cluster-other-ns.yaml",
        field="cluster_config layouts.other.pipeline_namespace: '..'"),
    row("check-layout-service-account-at", "check", "--cluster-config", "cluster-sa-at.yaml",
        field="cluster_config layouts.l.service_account: 'runner@x' is not a Kubernetes object name"),
    row("check-secret-name-token", "check", "--cluster-config", "cluster-secret-token.yaml",
        field="cluster_config secrets: (a value that looks like a credential, not shown) is not a Kubernetes object"),
    row("check-secret-name-path", "check", "--cluster-config", "cluster-secret-path.yaml",
        field="cluster_config secrets: '../nodes' is not a Kubernetes object name"),
    row("submit-namespace-underscore", *submit("-n", "team_a"), field="-n/--namespace"),
    row("submit-o-xml", *submit("-o", "xml"), field="-o/--output"),
    row("submit-o-path", *submit("-o", "run.yaml"), field="--out-file run.yaml"),
    row("schedule-namespace-dots", *schedule("--cron", "@daily", "-n", "a.b"), field="-n/--namespace"),
    row("runs-namespace-empty", "runs", "--host", DEAD, "-n", "", field="-n/--namespace: is empty"),
    row("submit-model-uri-tag", *submit("--param", "model_uri=oci://quay.io/org/m:v1"), field="model_uri",
        params=True),
    row("submit-param-no-equals", *submit("--param", "novalue"), field="--param", params=True),
    row("submit-unknown-pipeline", "submit", "nope", "--host", DEAD, field="PIPELINE"),
    row("submit-missing-file", "submit", "missing.yaml", "--host", DEAD, field="PIPELINE"),
    row("submit-not-a-pipeline-file", "submit", "list.yaml", "--host", DEAD, field="PIPELINE"),
    row("submit-no-host", "submit", "optimize-and-deploy", *REGISTRY, field="--host"),
    row("submit-host-not-http", "submit", "optimize-and-deploy", "--host", "ftp://kfp", *REGISTRY, field="--host"),
    row("submit-host-unreachable", *submit(), field="--host: cannot reach", code=3),
    row("submit-params-file-missing", *submit("--params-file", "missing.yaml"), field="--params-file", params=True),
    row("submit-params-file-list", *submit("--params-file", "list.yaml"), field="--params-file", params=True),
    row("submit-compiled-file-with-cluster-config", "submit", "list.yaml", "--host", DEAD, "--cluster-config",
        "cluster.yaml", field="--cluster-config"),
    row("submit-cluster-config-missing", *submit("--cluster-config", "missing.yaml"), field="cluster_config"),
    row("submit-poll-s-zero", *submit("--wait", "--poll-s", "0"), field="--poll-s"),
    row("schedule-params-file-list", *schedule("--cron", "@daily", "--params-file", "list.yaml"), field="--params-file",
        params=True),
    row("schedule-int-text", *schedule("--cron", "@daily", "--param", "seed=abc"), field="seed", params=True),
    row("schedule-float-text", *schedule("--every", "1d", "--param", "champion_tolerance=x"),
        field="champion_tolerance", params=True),
    row("schedule-cron-range", *schedule("--cron", "61 * * * *"), field="--cron"),
    row("schedule-cron-fields", *schedule("--cron", "* * *"), field="--cron"),
    row("schedule-cron-descriptor", *schedule("--cron", "@sometimes"), field="--cron"),
    row("schedule-cron-sunday-7", *schedule("--cron", "0 3 * * 7"), field="day-of-week 7"),
    row("schedule-every-zero", *schedule("--every", "0"), field="--every"),
    row("schedule-every-unit", *schedule("--every", "5x"), field="--every"),
    row("schedule-cron-and-every", *schedule("--cron", "@daily", "--every", "1d"), field="--every"),
    row("schedule-no-trigger", *schedule(), field="--cron"),
    row("schedule-concurrency-11", *schedule("--cron", "@daily", "--max-concurrency", "11"),
        field="--max-concurrency"),
    row("schedule-host-unreachable", *schedule("--cron", "@daily"), field="--host: cannot reach", code=3),
    # --- round 2 (issue 20): a later value never silently wins --------------------------------------
    row("run-param-twice", *run_local("--param", "dry_run=true", "--param", "dry_run=false"),
        field="--param: 'dry_run' is given twice", params=True),
    row("submit-param-twice", *submit("--param", "seed=1", "--param", "seed=2"), field="'seed' is given twice",
        params=True),
    row("schedule-param-twice", *schedule("--cron", "@daily", "--param", "namespace=a", "--param", "namespace=b"),
        field="'namespace' is given twice", params=True),
    row("run-params-file-duplicate-key", *run_local("--params-file", "dup.yaml"),
        field="--params-file: key 'dry_run' is given twice", params=True),
    row("run-params-file-duplicate-json-key", *run_local("--params-file", "dup.json"),
        field="key 'seed' is given twice", params=True),
    row("run-json-param-duplicate-key", *run_local("--param", 'eval_config={"limit": 5, "limit": 6}'),
        field="eval_config: key 'limit' is given twice", params=True),
    row("run-yaml-param-duplicate-key", *run_local("--param", "slo={ttft_p99_ms: 1, ttft_p99_ms: 2}"),
        field="key 'ttft_p99_ms' is given twice", params=True),
    row("run-list-param-duplicate-key", *run_local("--param", "recipes=[{a: 1, a: 2}]"),
        field="recipes: key 'a' is given twice", params=True),
    row("deploy-params-duplicate-key", *deploy("--params-file", "dup-deploy.yaml"),
        field="--params-file: key 'replicas' is given twice"),
    # --- bounded: alias bombs, deep nesting, huge values ------------------------------------------------
    row("run-param-alias-bomb", *run_local("--param", f"slo={BOMB}"), field="slo: expands to more than", params=True),
    row("run-params-file-alias-bomb", *run_local("--params-file", "bomb.yaml"), field="--params-file: expands",
        params=True),
    row("run-params-file-deep", *run_local("--params-file", "deep.yaml"), field="nested more than", params=True),
    row("run-param-deep-json", *run_local("--param", "eval_config=" + "[" * 50_000 + "]" * 50_000),
        field="eval_config: is nested more than", params=True),
    row("run-params-file-huge-value", *run_local("--params-file", "huge.yaml"), field="seed", params=True),
    row("run-params-file-huge-key", *run_local("--params-file", "huge-key.yaml"), field="--params-file", params=True),
    # --- encodings: UTF-8 with a BOM and UTF-16 are read; binary and other encodings are one line ----
    row("run-params-file-bom", *run_local("--params-file", "bom.yaml"), field="seed: 'abc'", params=True),
    row("run-params-file-utf16", *run_local("--params-file", "utf16.yaml"), field="seed: 'abc'", params=True),
    row("run-params-file-binary", *run_local("--params-file", "binary.yaml"), field="--params-file: ", params=True),
    row("run-params-file-latin1", *run_local("--params-file", "latin1.yaml"), field="is not UTF-8", params=True),
    row("deploy-params-binary", *deploy("--params-file", "binary.yaml"), field="--params-file: "),
    row("plan-binary-config", "plan", "binary.yaml", field="model: binary.yaml is a binary file"),
    row("compile-cluster-config-binary", "compile", "--out", "compiled", "--pipeline", "promote", "--cluster-config",
        "binary.yaml", field="cluster_config"),
    row("compile-cluster-config-duplicate-key", "compile", "--out", "compiled", "--pipeline", "promote",
        "--cluster-config", "dup.yaml", field="cluster_config: key 'dry_run' is given twice"),
    row("submit-binary-pipeline-file", "submit", "binary.yaml", "--host", DEAD, field="PIPELINE"),
    row("validate-binary", "validate", "binary.yaml", field="binary.yaml"),
    # --- numbers: NaN, 1e999, huge and negative counts and seeds, full-width digits -------------------
    row("run-seed-negative", *run_local("--param", "seed=-1"), field="seed: must be between 0", params=True),
    row("run-seed-400-digits", *run_local("--param", "seed=" + "9" * 400), field="seed", params=True),
    row("run-seed-int64", *run_local("--param", "seed=9223372036854775808"), field="seed", params=True),
    row("run-seed-fullwidth", *run_local("--param", "seed=\uff11\uff12"), field="seed", params=True),
    row("run-float-fullwidth", *run_local("--param", "champion_tolerance=\uff10.5"), field="champion_tolerance",
        params=True),
    row("run-samples-huge", *run_local("--param", "num_calibration_samples=99999999999"),
        field="num_calibration_samples", params=True),
    row("run-samples-negative", *run_local("--param", "num_calibration_samples=-5"), field="num_calibration_samples",
        params=True),
    row("run-eval-limit-nan", *run_local("--param", 'eval_config={"limit": NaN}'), field="eval_config", params=True),
    row("run-eval-limit-text", *run_local("--param", 'eval_config={"limit": "5"}'), field="eval_config.limit",
        params=True),
    row("run-eval-seed-negative", *run_local("--param", 'eval_config={"seed": -1}'), field="eval_config.seed",
        params=True),
    row("run-eval-limit-1e308", *run_local("--param", 'eval_config={"limit": 1e308}'), field="eval_config.limit",
        params=True),
    row("run-bench-max-seconds-1e999", *run_local("--param", 'benchmark_config={"max_seconds": 1e999}'),
        field="benchmark_config", params=True),
    row("run-bench-seed-huge", *run_local("--param", 'benchmark_config={"seed": 100000000000000000000}'),
        field="benchmark_config.seed", params=True),
    row("run-bench-requests-text", *run_local("--param", 'benchmark_config={"max_requests": "12"}'),
        field="benchmark_config.max_requests", params=True),
    row("run-bench-repeats-zero", *run_local("--param", 'benchmark_config={"repeats": 0}'),
        field="benchmark_config.repeats", params=True),
    # lists bounded before anything walks them (guidellm.MAX_LOADS, MAX_VLLM_ARGS)
    row("run-bench-loads-too-many", *run_local("--param", "benchmark_config=" + json.dumps({"loads": [1] * 65})),
        field="benchmark_config.loads: lists 65 load levels, more than 64", params=True),
    row("run-bench-vllm-args-too-many", *run_local(
        "--param", "benchmark_config=" + json.dumps({"vllm_args": ["--enforce-eager"] * 257})),
        field="benchmark_config.vllm_args: holds 257 entries, more than 256", params=True),
    # benchmark_config.workload (issue 35): the recorded traffic the benchmark replays, checked at pre-flight
    row("run-bench-workload-no-source", *run_local("--param", 'benchmark_config={"workload": {"seed": 1}}'),
        field="workload", params=True),
    row("run-bench-workload-two-sources", *run_local("--param", 'benchmark_config={"workload": {"local": true, '
                                                                 '"trace": "t.jsonl"}}'), field="workload", params=True),
    row("run-bench-workload-unknown-key", *run_local("--param", 'benchmark_config={"workload": {"local": true, '
                                                                 '"replay": 2}}'), field="workload", params=True),
    row("run-bench-workload-not-object", *run_local("--param", 'benchmark_config={"workload": "ours.jsonl"}'),
        field="benchmark_config", params=True),
    row("run-bench-repeats-sweep", *run_local("--param", 'benchmark_config={"profile": "sweep", "repeats": 2}'),
        field="benchmark_config.repeats", params=True),
    row("run-slo-latency-ratio-zero", *run_local("--param", 'slo={"max_latency_ratio": 0}'),
        field="slo.max_latency_ratio", params=True),
    row("run-yaml-inf", *run_local("--param", "slo={ttft_p99_ms: .inf}"), field="slo", params=True),
    # the error budget the deployed service's burn-rate alerts are multiples of (shipyard.serving.alerts)
    row("run-slo-error-budget-null", *run_local("--param", 'slo={"error_budget": null}'),
        field="slo.error_budget: is null: an SLO without an error budget", params=True),
    row("run-slo-error-budget-zero", *run_local("--param", 'slo={"error_budget": 0}'),
        field="slo.error_budget: must be > 0", params=True),
    row("run-slo-error-budget-too-large", *run_local("--param", 'slo={"error_budget": 0.1}'),
        field="slo.error_budget: must be < 0.0694", params=True),
    row("run-slo-error-budget-percent", *run_local("--param", 'slo={"error_budget": "1%"}'),
        field="slo.error_budget: must be a number", params=True),
    # whether a replay of the user's recorded workload that misses the SLO fails the gate (issue 35)
    row("run-slo-judge-replay-text", *run_local("--param", 'slo={"judge_replay": "no"}'),
        field="slo.judge_replay: must be true or false", params=True),
    # --- names Kubernetes and registries refuse, empty names ---------------------------------------------
    row("run-namespace-uppercase", *run_local("--param", "namespace=Bad_NS"), field="namespace", params=True),
    row("run-namespace-too-long", *run_local("--param", "namespace=" + "a" * 64), field="namespace", params=True),
    row("run-deploy-name-bad", *run_local("--param", "deploy_name=-llm"), field="'-llm'", params=True),
    row("run-repository-uppercase", *run_local("--param", "repository=Team/Model"), field="repository", params=True),
    row("run-experiment-empty", *run_local("--param", "experiment="), field="experiment", params=True),
    row("run-text-column-blank", *run_local("--param", "text_column= "), field="text_column", params=True),
    # --- model URIs: spaces in Hub ids, S3 without a key, .. out of a PVC, credentials anywhere -------------
    row("run-model-uri-hf-space", *run_local("--param", "model_uri=hf://org/my model"), field="model_uri", params=True),
    row("run-model-uri-s3-no-key", *run_local("--param", "model_uri=s3://bucket"), field="model_uri", params=True),
    row("run-model-uri-pvc-dotdot", *run_local("--param", "model_uri=pvc://models/../../etc"), field="model_uri",
        params=True),
    row("run-candidate-uri-pvc-claim", "run", "--local", "promote", "--work-dir", "work",
        "--param", "candidate_uri=pvc://Models/x", field="candidate_uri", params=True),
    row("run-model-uri-s3-slash-secret", *run_local("--param", f"model_uri=s3://{AWS_KEY_ID}:{SECRET}/x@bucket/m"),
        field="model_uri", params=True),
    row("run-model-uri-at-in-secret", *run_local("--param", f"model_uri=s3://key:p@{SECRET}@bucket/m"),
        field="model_uri", params=True),
    row("run-model-uri-signed-query", *run_local("--param", f"model_uri=s3://bucket/m?X-Amz-Signature={SECRET}"),
        field="model_uri", params=True),
    row("run-registry-slash-password", *run_local("--param", f"registry=bob:{SECRET}/x@quay.io"), field="registry",
        params=True),
    row("deploy-s3-uri-slash-secret", *deploy(uri=f"s3://{AWS_KEY_ID}:{SECRET}/x@bucket/model"),
        field="--model-uri"),
    row("submit-host-password-with-at", "submit", "optimize-and-deploy", "--host", f"http://bob:p@{SECRET}@127.0.0.1:9",
        "--param", "dry_run=true", field="--host: http://... carries credentials"),
    row("submit-token-crlf", *submit("--token", f"{SECRET}\r\n"), field="--host: cannot reach", code=3),
    row("submit-cookie-crlf", *submit("--cookie", f"authservice_session={SECRET}\r\n"), field="--host: cannot reach",
        code=3),
    row("submit-token-control-char", *submit("--token", f"abc\n{SECRET}"), field="--token"),
    # --- lora_adapters: names, URIs, kserve#6094, credentials never echoed ------------------------------
    row("run-lora-not-json", *run_local("--param", "lora_adapters={sql: "), field="lora_adapters: is not valid JSON",
        params=True),
    row("run-lora-number", *run_local("--param", "lora_adapters=5"), field="lora_adapters: must be a JSON mapping",
        params=True),
    row("run-lora-oci", *run_local("--param", f'lora_adapters={{"sql": "oci://quay.io/org/sql@{DIGEST}"}}'),
        field="lora_adapters.sql: KServe does not load LoRA adapters from oci:// yet (kserve#6094)", params=True),
    row("run-lora-bad-name", *run_local("--param", 'lora_adapters={"my adapter": "hf://org/sql-lora"}'),
        field="lora_adapters.my adapter: 'my adapter' is not an adapter name", params=True),
    row("run-lora-name-newline", *run_local("--param", 'lora_adapters={"my\\nadapter": "hf://org/sql-lora"}'),
        field="lora_adapters.my\\nadapter: 'my\\nadapter' is not an adapter name", params=True),
    row("run-lora-duplicate", *run_local("--param", 'lora_adapters=[{"name": "a", "uri": "hf://org/x"}, '
                                         '{"name": "a", "uri": "hf://org/y"}]'),
        field="lora_adapters[1]: adapter 'a' is given twice", params=True),
    row("run-lora-list-item", *run_local("--param", 'lora_adapters=[{"name": "a"}]'),
        field="lora_adapters[0]: must be an object with exactly name and uri", params=True),
    row("run-lora-unknown-scheme", *run_local("--param", 'lora_adapters={"a": "ftp://host/x"}'),
        field="lora_adapters.a: unknown URI scheme", params=True),
    row("run-lora-embedded", *run_local("--param", 'lora_adapters={"a": "embedded://smollm2-135m-instruct"}'),
        field="lora_adapters.a: embedded:// names a built-in base model", params=True),
    row("run-lora-credentials", *run_local("--param", f'lora_adapters={{"a": "s3://{AWS_KEY_ID}:{SECRET}@bucket/a"}}'),
        field="lora_adapters.a: s3://... carries credentials", params=True),
    row("run-lora-missing-folder", *run_local("--param", 'lora_adapters={"a": "/nonexistent/adapter"}'),
        field="lora_adapters.a: '/nonexistent/adapter' is not a folder", params=True),
    row("run-lora-folder-without-config", *run_local("--param", 'lora_adapters={"a": "emptydir"}'),
        field="lora_adapters.a: emptydir has no adapter_config.json", params=True),
    row("submit-lora-local-folder", *submit("--param", 'lora_adapters={"a": "lora-adapter"}'),
        field="lora_adapters.a: lora-adapter is a local folder", params=True),
    row("submit-lora-bad-hf-id", *submit("--param", 'lora_adapters={"a": "hf://org/bad name"}'),
        field="lora_adapters.a: 'org/bad name' is not a Hugging Face model id", params=True),
    # --- eval_sets: the user's own eval sets, every row checked at pre-flight (issue 36) -----------------
    row("run-eval-sets-schema", *run_local("--param", eval_sets("es-bad-row.jsonl")),
        field="eval_sets.s: row 2: field 'reference' is missing", params=True),
    row("run-eval-sets-empty", *run_local("--param", eval_sets("es-empty.jsonl")),
        field="eval_sets.s: es-empty.jsonl holds no rows", params=True),
    row("run-eval-sets-duplicate-ids", *run_local("--param", eval_sets("es-dup-ids.jsonl")),
        field="eval_sets.s: row 3: id 'q1' is already used by row 1", params=True),
    row("run-eval-sets-over-cap", *run_local("--param", eval_sets("es-qa.jsonl", max_rows=2)),
        field="eval_sets.s: holds 3 rows, more than its cap max_rows=2", params=True),
    row("run-eval-sets-rag-without-contexts", *run_local("--param", eval_sets("es-rag-no-ctx.jsonl", form="rag")),
        field="eval_sets.s: row 1: field 'retrieved_contexts' needs at least 1 item(s), got 0", params=True),
    row("run-eval-sets-rubric-without-judge", *run_local("--param", eval_sets("es-rubric.jsonl", form="rubric")),
        field="eval_sets.s: is a rubric set but eval_sets names no judge", params=True),
    row("run-eval-sets-rubric-on-hf", *run_local(
        "--param", "eval_backend=hf", "--param", "eval_sets=" + json.dumps(
            {"sets": [{"name": "s", "form": "rubric", "uri": "es-rubric.jsonl"}],
             "judge": {"model_uri": "embedded://smollm2-135m-instruct"}})),
        field="eval_sets.s: is a rubric set, whose answers come from the served model, but eval_backend is hf",
        params=True),
    row("run-eval-sets-credentials", *run_local("--param", eval_sets(f"s3://{AWS_KEY_ID}:{SECRET}@bucket/s.jsonl")),
        field="eval_sets: the value carries credentials (not shown)", params=True),
    row("run-eval-sets-missing-file", *run_local("--param", eval_sets("nonexistent.jsonl")),
        field="eval_sets.s: nonexistent.jsonl does not exist", params=True),
    row("run-eval-sets-unknown-form", *run_local("--param", eval_sets("es-qa.jsonl", form="essay")),
        field="eval_sets.sets[0].form: must be 'mcq', 'qa', 'chat', 'rag' or 'rubric'", params=True),
    row("run-eval-sets-stdin", *run_local("--param", eval_sets("-")),
        field="eval_sets.s: '-' is not a .jsonl file", params=True),
    row("run-eval-sets-not-json", *run_local("--param", "eval_sets=[{"), field="eval_sets: is not valid JSON",
        params=True),
    row("run-eval-sets-leak", *run_local("--param", eval_sets("es-leak.jsonl", max_leak_share=0.0)),
        field="eval_sets.s: s: 1 of 2 rows overlap the calibration set (exact 1, n-gram 0): rows 1; limit 0% EXCEEDED",
        params=True),
    row("run-eval-sets-unpinned-judge", *run_local(
        "--param", 'eval_sets={"sets": [], "judge": {"model_uri": "hf://org/judge"}}'),
        field="eval_sets.judge.model_uri: an hf:// judge is not pinned to a commit", params=True),
    # a digest given for a set or the judge's labelled slice pins its content: checked against the bytes
    row("run-eval-sets-wrong-sha256", *run_local("--param", eval_sets("es-qa.jsonl", sha256="0" * 64)),
        field="is not the pinned 0000000000000000...: it changed after it was pinned", params=True),
    row("run-eval-sets-sha256-not-hex", *run_local("--param", eval_sets("es-qa.jsonl", sha256="sha256:abc")),
        field="eval_sets.sets[0].sha256: is not a sha256 digest", params=True),
    row("run-eval-sets-wrong-labels-sha256", *run_local("--param", "eval_sets=" + json.dumps(
        {"sets": [], "judge": {"model_uri": "embedded://smollm2-135m-instruct",
                               "labels_uri": "builtin://homework_judge_labels.jsonl", "labels_sha256": "1" * 64}})),
        field="eval_sets.judge.labels_uri: content sha256 ", params=True),
    # the caps on the judge's calls (pairwise verdicts and Ragas): one line each, naming the cap
    row("run-eval-sets-judge-max-rows", *run_local("--param", judge_cap(max_rows=0)),
        field="eval_sets.judge.max_rows: must be a whole number from 1 to 1000000, got 0", params=True),
    row("run-eval-sets-judge-max-tokens", *run_local("--param", judge_cap(max_tokens=4096)),
        field="eval_sets.judge.max_tokens: must be a whole number from 1 to 1024, got 4096", params=True),
    row("run-eval-sets-judge-ragas-max-tokens", *run_local("--param", judge_cap(ragas_max_tokens=8)),
        field="eval_sets.judge.ragas_max_tokens: must be a whole number from 16 to 8192, got 8", params=True),
    row("run-eval-sets-judge-concurrency", *run_local("--param", judge_cap(concurrency="4")),
        field="eval_sets.judge.concurrency: must be a whole number from 1 to 64, got '4'", params=True),
    # --- deploy_config: wrong types inside, caught before any step --------------------------------------
    row("run-deploy-config-rollout-strategy", *run_local("--param", 'deploy_config={"rollout": {"strategy": "big-bang"}}'),
        field="deploy_config.rollout.strategy", params=True),
    row("run-deploy-config-rollout-steps", *run_local(
        "--param", 'deploy_config={"rollout": {"strategy": "canary", "steps": [10, 50], "route": {"name": "r"}}}'),
        field="deploy_config.rollout.steps", params=True),
    row("run-deploy-config-rollout-no-route", *run_local("--param", 'deploy_config={"rollout": {"strategy": "canary"}}'),
        field="deploy_config.rollout.route", params=True),
    row("run-deploy-config-verify-tolerance", *run_local("--param", 'deploy_config={"verify": {"min_match_rate": 1.5}}'),
        field="deploy_config.verify.min_match_rate", params=True),
    row("run-deploy-config-verify-enabled-text", *run_local("--param", 'deploy_config={"verify": {"enabled": "no"}}'),
        field="deploy_config.verify.enabled", params=True),
    row("run-deploy-config-verify-run-timeout-text", *run_local(
        "--param", 'deploy_config={"verify": {"run_timeout_s": "30m"}}'),
        field="deploy_config.verify.run_timeout_s", params=True),
    row("run-deploy-config-verify-insecure-tls-text", *run_local(
        "--param", 'deploy_config={"verify": {"insecure_tls": "yes"}}'),
        field="deploy_config.verify.insecure_tls: 'yes' is not true or false", params=True),
    row("run-deploy-config-verify-auth-token-pasted", *run_local(
        "--param", f'deploy_config={{"verify": {{"auth_secret_env": "{TOKEN_LIKE}"}}}}'),
        field="deploy_config.verify.auth_secret_env: is not the name", params=True),
    row("run-deploy-config-verify-ca-bundle-number", *run_local(
        "--param", 'deploy_config={"verify": {"ca_bundle": 3}}'),
        field="deploy_config.verify.ca_bundle: 3 is not a file path", params=True),
    row("run-deploy-config-verify-unknown", *run_local("--param", 'deploy_config={"verify": {"golden": 3}}'),
        field="deploy_config.verify.golden", params=True),
    row("run-deploy-config-scaling-list", *run_local("--param", 'deploy_config={"scaling": [1]}'),
        field="deploy_config.scaling", params=True),
    row("run-deploy-config-labels-list", *run_local("--param", 'deploy_config={"labels": [1]}'),
        field="deploy_config.labels", params=True),
    row("run-deploy-config-namespace-number", *run_local("--param", 'deploy_config={"namespace": 5}'),
        field="deploy_config.namespace", params=True),
    row("run-deploy-config-preset-list", *run_local("--param", 'deploy_config={"preset": []}'),
        field="deploy_config.preset", params=True),
    row("deploy-params-scaling-list", *deploy("--params-file", "scaling-list.yaml"), field="deploy_config.scaling"),
    # --- deploy_config.apply: one parser for the pre-flight, the deploy step, deploy and check (issue 30) ----------
    row("deploy-params-apply-poll-text", *deploy("--params-file", "apply-poll-text.yaml"),
        field="deploy_config.apply.poll_s: 'abc' is not a number of seconds"),
    row("deploy-params-apply-poll-true", *deploy("--params-file", "apply-poll-true.yaml"),
        field="deploy_config.apply.poll_s: True is not a number of seconds"),
    row("deploy-params-apply-list-wait-timeout", *deploy("--params-file", "apply-list.yaml", "--wait-timeout", "60"),
        field="deploy_config.apply: must be an object"),
    row("check-deploy-config-apply-poll-text", "check", "--deploy-config", '{"apply": {"poll_s": "abc"}}',
        field="deploy_config.apply.poll_s"),
    row("check-deploy-config-rollout-strategy", "check", "--deploy-config", '{"rollout": {"strategy": "big-bang"}}',
        field="deploy_config.rollout.strategy"),
    row("run-deploy-config-apply-poll-true", *run_local("--param", 'deploy_config={"apply": {"poll_s": true}}'),
        field="deploy_config.apply.poll_s", params=True),
    # --- the scheduler config KServe v0.20's endpoint picker decodes, and P/D keeping its profile (issue 32) -------
    row("check-deploy-config-scheduler-api", "check", "--deploy-config",
        '{"router": {"scheduler": {"config": {"apiVersion": "llm-d.ai/v1", "kind": "EndpointPickerConfig"}}}}',
        field="deploy_config.router.scheduler.config.apiVersion: 'llm-d.ai/v1' is not decoded"),
    row("run-deploy-config-pd-scheduler-config", *run_local(
        "--param", 'deploy_config={"preset": "pd-nixl", "router": {"scheduler": {"config": '
        '{"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig", "plugins": [{"type": "queue-scorer"}]}}}}'),
        field="deploy_config.router.scheduler.config: replaces KServe's prefill/decode scheduling profile", params=True),
    row("check-deploy-config-pd-latency-predictor", "check", "--deploy-config",
        '{"preset": "pd-nixl", "router": {"scheduler": {"preset": "latency-predictor"}}}',
        field="deploy_config.router.scheduler.preset: 'latency-predictor' has no prefill/decode profile"),
    row("run-deploy-config-annotation-token", *run_local("--param", f'deploy_config={{"annotations": {{"a": "Bearer {SECRET}"}}}}'),
        field="deploy_config.annotations.a: carries credentials", params=True),
    row("run-deploy-config-env-s3-uri", *run_local("--param", f'deploy_config={{"env": {{"SRC": "s3://k:{SECRET}/x@b/m"}}}}'),
        field="deploy_config.env.SRC: carries credentials", params=True),
    row("run-recipe-misspelt-modifier", *run_local("--params-file", "recipe-typo.yaml"),
        field="recipes[0]: unknown llmcompressor modifier 'GPTQModifer'", params=True),
    row("run-recipe-duplicate-modifier", *run_local("--params-file", "recipe-dup.yaml"),
        field="recipes[0]: key 'GPTQModifier' is given twice", params=True),
    # --- schedules that never fire or cannot be stored ----------------------------------------------------
    row("schedule-cron-feb-30", *schedule("--cron", "0 0 30 2 *"), field="--cron: '0 0 30 2 *' never fires"),
    row("schedule-cron-apr-31", *schedule("--cron", "0 12 31 4 *"), field="never fires"),
    row("schedule-cron-fullwidth", *schedule("--cron", "0 \uff13 * * *"), field="--cron"),
    row("schedule-every-beyond-int64", *schedule("--every", "99999999999999999999"), field="--every"),
    row("schedule-every-weeks-overflow", *schedule("--every", "99999999999999999w"), field="--every"),
    row("schedule-every-fullwidth", *schedule("--every", "\uff11d"), field="--every"),
    # --- wrong answers with exit 0 ---------------------------------------------------------------------
    row("plan-kv-heads-zero", "plan", "kv-heads-zero.json", field="num_key_value_heads"),
    row("plan-heads-negative", "plan", "heads-negative.json", field="num_attention_heads"),
    row("plan-heads-bool", "plan", "heads-bool.json", field="num_attention_heads"),
    row("plan-experts-negative", "plan", "experts-negative.json", field="num_local_experts"),
    row("plan-max-position-negative", "plan", "max-pos-negative.json", field="max_position_embeddings"),
    row("compile-image-registry-url", "compile", "--out", "compiled", "--pipeline", "promote",
        "--image-registry", "https://quay.io/org", field="--image-registry"),
    row("compile-image-registry-final-newline", "compile", "--out", "compiled", "--pipeline", "promote",
        "--image-registry", "quay.io/org\n", field="--image-registry"),
    row("compile-image-registry-credentials", "compile", "--out", "compiled", "--pipeline", "promote",
        "--image-registry", f"bob:{SECRET}@quay.io/org", field="--image-registry"),
    row("compile-cluster-config-typo", "compile", "--out", "compiled", "--pipeline", "promote", "--cluster-config",
        "cluster-typo.yaml", field="cluster_config gpuu: is not a cluster setting"),
    row("compile-cluster-config-claims-string", "compile", "--out", "compiled", "--pipeline", "promote",
        "--cluster-config", "cluster-claims.yaml", field="cluster_config pvc.claims: must be a list"),
    row("compile-cluster-config-security-root", "compile", "--out", "compiled", "--pipeline", "promote",
        "--cluster-config", "cluster-secctx-root.yaml", field="cluster_config security_context.run_as_user: 0 is root"),
    row("compile-cluster-config-security-non-root-text", "compile", "--out", "compiled", "--pipeline", "promote",
        "--cluster-config", "cluster-secctx-text.yaml",
        field="cluster_config security_context.run_as_non_root: must be true or false"),
    row("run-work-dir-root", "run", "--local", "--work-dir", "/", field="--work-dir"),
    row("run-work-dir-usr", "run", "--local", "--work-dir", "/usr", field="--work-dir"),
    # --- the README's own YAML example is accepted: the row fails on the next, deliberate, mistake --------
    row("run-readme-slo-yaml-accepted", *run_local("--param", "slo={ttft_p99_ms: 800}", "--param", "seed=-1"),
        field="seed", params=True),
    row("schedule-readme-slo-yaml-accepted", *schedule("--cron", "@daily", "--param", "slo={ttft_p99_ms: 800}",
                                                        "--param", "seed=-1"), field="seed", params=True),
    # --- runs, completion, images, setup, top level -------------------------------------------------
    row("runs-host-unreachable", "runs", "--host", DEAD, field="--host: cannot reach", code=3),
    row("runs-no-host", "runs", field="--host"),
    row("runs-limit-zero", "runs", "--host", DEAD, "--limit", "0", field="--limit"),
    row("runs-o-format", "runs", "--host", DEAD, "-o", "table.txt", field="--out-file"),
    row("completion-fish", "completion", "fish", field="shell"),
    row("completion-no-shell", "completion", field="shell"),
    row("images-flavor", "images", "build", "--flavor", "tpu", field="--flavor"),
    row("setup-runtime", "setup", "--runtime", "cuda", field="--runtime"),
    # --- verify: the URL, the recorded candidate, the tolerance (a timeout and a wrong served model name: tests/test_verify.py, tests/test_deploy_verify.py)
    row("verify-url-unreachable", *verify(), field="url: http://127.0.0.1:9/v1/models is unreachable", code=3),
    row("verify-url-not-http", *verify(url="127.0.0.1:8000"), field="url"),
    row("verify-empty-golden-set", *verify(candidate="empty-golden.json"), field="golden: "),
    row("verify-candidate-missing", *verify(candidate="nope.json"), field="candidate"),
    row("verify-model-dir-missing", *verify("--model-dir", "missing"), field="--model-dir: "),
    row("verify-candidate-not-golden", *verify(candidate="list.json"), field="golden"),
    row("verify-min-match-rate-above-1", *verify("--min-match-rate", "1.5"), field="min_match_rate"),
    row("verify-min-match-rate-negative", *verify("--min-match-rate", "-0.1"), field="min_match_rate"),
    row("verify-min-match-rate-text", *verify("--min-match-rate", "most"), field="--min-match-rate"),
    row("verify-timeout-zero", *verify("--timeout", "0"), field="--timeout"),
    row("verify-checks-unknown", *verify("--checks", "models,golden,vibes"), field="verify.checks"),
    row("verify-checks-without-golden", *verify("--checks", "models"), field="verify.checks"),
    row("verify-metrics-url-pool", *verify("--metrics-url", "router=http://x/metrics"), field="--metrics-url"),
    row("verify-config-not-json", *verify("--config", "{slo"), field="--config"),
    row("verify-slo-tolerance-below-1", *verify("--config", '{"slo_tolerance": 0.5}'), field="verify.slo_tolerance"),
    row("verify-run-timeout-zero", *verify("--config", '{"run_timeout_s": 0}'), field="verify.run_timeout_s"),
    # the gateway's TLS and auth (issue 32): the CA file and the token's variable checked before anything is
    # asked; a token pasted where the variable's name belongs is refused without being shown
    row("verify-ca-bundle-missing", *verify("--ca-bundle", "missing-ca.pem"),
        field="verify.ca_bundle: missing-ca.pem does not exist"),
    row("verify-ca-bundle-not-pem", *verify("--ca-bundle", "golden.json"),
        field="verify.ca_bundle: golden.json is not a PEM CA bundle"),
    row("verify-insecure-tls-not-bool", *verify("--config", '{"insecure_tls": "yes"}'),
        field="verify.insecure_tls: 'yes' is not true or false"),
    row("verify-insecure-tls-with-ca-bundle", *verify("--insecure-tls", "--ca-bundle", "golden.json"),
        field="verify.insecure_tls: is true while verify.ca_bundle is given"),
    row("verify-auth-env-unset", *verify("--auth-secret-env", "SHIPYARD_TEST_UNSET_GATEWAY_TOKEN"),
        field="verify.auth_secret_env: $SHIPYARD_TEST_UNSET_GATEWAY_TOKEN is not set"),
    row("verify-auth-env-token-pasted", *verify("--auth-secret-env", TOKEN_LIKE),
        field="verify.auth_secret_env: is not the name of an environment variable"),
    row("verify-auth-env-bearer-pasted", *verify("--config", f'{{"auth_secret_env": "Bearer {SECRET}"}}'),
        field="verify.auth_secret_env: is not the name of an environment variable"),
    row("verify-auth-header-custom-with-lm-eval", *verify("--auth-secret-env", "GATEWAY_TOKEN", "--auth-header",
                                                          "X-Api-Key"), field="verify.auth_header: 'X-Api-Key'"),
    # --- watch (issue 38): the window, the tolerance, Prometheus's URL, the champion's record
    row("watch-window-not-a-window", *watch("--window", "half an hour"), field="--window"),
    row("watch-window-shorter-than-two-scrapes", *watch("--window", "30s"), field="--window: 30 s is shorter"),
    row("watch-tolerance-not-json", *watch("--tolerance", "{ttft"), field="--tolerance: is not JSON"),
    row("watch-tolerance-unknown-dimension", *watch("--tolerance", '{"latency": 1}'), field="--tolerance.latency"),
    row("watch-tolerance-prefix-cache-negative", *watch("--tolerance", '{"prefix_cache": -0.1}'),
        field="--tolerance.prefix_cache: must be a finite number in [0, 1]"),
    row("watch-tolerance-negative", *watch("--tolerance", '{"ttft": -0.5}'), field="--tolerance.ttft"),
    row("watch-tolerance-distribution-above-one", *watch("--tolerance", '{"input_distribution": 1.5}'),
        field="--tolerance.input_distribution: must be a finite number in [0, 1]"),
    row("watch-selector-not-matchers", *watch("--selector", "namespace=llm"), field="--selector"),
    row("watch-prometheus-not-http", *watch(prometheus="prometheus:9090"), field="--prometheus"),
    row("watch-prometheus-credentials", *watch(prometheus=f"http://admin:{SECRET}@127.0.0.1:9"),
        field="--prometheus"),
    row("watch-prometheus-unreachable", *watch(), field="--prometheus: http://127.0.0.1:9 is unreachable", code=3),
    row("watch-champion-missing", *watch(champion="nope"), field="--champion"),
    row("watch-champion-not-a-record", *watch(champion="list.json"), field="--champion"),
    row("watch-token-file-missing", *watch("--prometheus-token-file", "nope.txt"), field="--prometheus-token-file"),
    row("watch-model-by-tag", *watch_model("--key", "key.pem", model="oci://quay.io/org/model:latest"), field="--model"),
    row("watch-model-credentials", *watch_model("--key", "key.pem", model=f"oci://bob:{SECRET}@quay.io/org/m@{DIGEST}"),
        field="--model"),
    row("watch-model-without-a-key", *watch_model(), field="--key: is required with --model"),
    row("watch-model-key-missing", *watch_model("--key", "nope.pem"), field="--key: nope.pem is not a file"),
    row("watch-model-and-champion", *watch_model("--champion", "candidate.json"), field="--champion"),
    row("watch-champion-base-credentials", *watch(champion="champion-base-creds"),
        field="--champion: s3://... carries credentials"),
    # --- watch --requalify: the run it would submit is checked before anything is read ---------------------
    row("watch-host-without-requalify", *watch("--host", "http://127.0.0.1:9"),
        field="--host: is an option of the re-qualification run, which only --requalify submits"),
    row("watch-param-without-requalify", *watch("--param", "registry=quay.io"), field="--param: is an option"),
    row("watch-requalify-no-host", *watch("--requalify"), field="--host: no KFP host given"),
    row("watch-requalify-host-not-http", *watch("--requalify", "--host", "kfp:8080"), field="--host"),
    row("watch-requalify-host-credentials", *watch("--requalify", "--host", f"http://bob:{SECRET}@127.0.0.1:9"),
        field="--host: http://... carries credentials"),
    row("watch-requalify-namespace", *watch("--requalify", "--host", DEAD, "-n", "Team_A"), field="-n/--namespace"),
    row("watch-requalify-param-not-key-value", *watch("--requalify", "--host", DEAD, "--param", "registry"),
        field="--param"),
    row("watch-requalify-params-file-missing", *watch("--requalify", "--host", DEAD, "--params-file", "nope.yaml"),
        field="--params-file"),
    row("watch-requalify-benchmark-config-given",
        *watch("--requalify", "--host", DEAD, "--param", 'benchmark_config={"loads": [1]}'),
        field="--param benchmark_config: is the proposal's"),
    row("watch-requalify-champion-without-base", *watch("--requalify", "--host", DEAD, *REGISTRY),
        field="--requalify: needs the base model"),
    row("watch-requalify-unknown-param",
        *watch("--requalify", "--host", DEAD, *REGISTRY, "--param", "model_uri=hf://a/b", "--param", "regsitry=x"),
        field="--param: unknown parameter(s) regsitry"),
    row("watch-requalify-registry-empty", *watch("--requalify", "--host", DEAD, "--param", "model_uri=hf://a/b"),
        field="registry: is empty while dry_run is false"),
    row("watch-requalify-prometheus-unreachable",
        *watch("--requalify", "--host", DEAD, *REGISTRY, "--param", "model_uri=hf://a/b"),
        field="--prometheus: http://127.0.0.1:9 is unreachable", code=3),
    # --- round 3 (issue 34): credentials in every URI-like field, in every userinfo form, refused up front
    # and never shown; a Secret's name that looks like a token is not echoed -----------------------------
    row("verify-url-token-as-user", *verify(url=f"http://{SECRET}@127.0.0.1:9"), field="url: http://... carries "
        "credentials"),
    row("verify-url-password-with-quote", *verify(url=f"http://bob:pa'{SECRET}@127.0.0.1:9"),
        field="url: http://... carries credentials"),
    row("verify-metrics-url-credentials", *verify("--metrics-url", f"decode=http://{SECRET}@127.0.0.1:9/metrics"),
        field="verify.metrics_urls.decode: http://... carries credentials"),
    row("check-kfp-host-token-as-user", "check", "--kfp-host", f"http://{SECRET}@127.0.0.1:9",
        field="--kfp-host: http://... carries credentials"),
    row("check-mlflow-url-password", "check", "--mlflow-url", f"http://bob:{SECRET}@127.0.0.1:9",
        field="--mlflow-url: http://... carries credentials"),
    row("check-registry-credentials", "check", "--registry", f"bob:{SECRET}@quay.io", field="--registry: carries "
        "credentials"),
    row("submit-host-token-as-user", "submit", "optimize-and-deploy", "--host", f"https://{SECRET}@127.0.0.1:9",
        *REGISTRY, field="--host: https://... carries credentials"),
    row("alias-tracking-uri-token-as-user", "alias", "show", "tiny", "--tracking-uri", f"http://{SECRET}@127.0.0.1:9",
        field="--tracking-uri: http://... carries credentials"),
    row("run-tracking-uri-token-as-user", *run_local("--param", f"tracking_uri=http://{SECRET}@127.0.0.1:9"),
        field="tracking_uri: http://... carries credentials", params=True),
    row("run-tracking-uri-percent-escaped-password", *run_local(
        "--param", f"tracking_uri=https://bob:p%40{SECRET}%3A@mlflow.example"),
        field="tracking_uri: https://... carries credentials", params=True),
    row("submit-tracking-uri-token-as-user", *submit("--param", f"tracking_uri=https://{SECRET}@mlflow.example"),
        field="tracking_uri: https://... carries credentials", params=True),
    row("run-calibration-dataset-credentials", *run_local(
        "--param", f"calibration_dataset=s3://{AWS_KEY_ID}:{SECRET}@bucket/calib.jsonl"),
        field="calibration_dataset: s3://... carries credentials", params=True),
    row("run-modelcar-base-image-credentials", *run_local(
        "--param", f"modelcar_base_image=bob:{SECRET}@quay.io/org/busybox@{DIGEST}"),
        field="modelcar_base_image: the value carries credentials", params=True),
    row("run-model-uri-token-as-user", *run_local("--param", f"model_uri=hf://{SECRET}@org/model"),
        field="model_uri: hf://... carries credentials", params=True),
    row("run-model-uri-password-with-quote", *run_local("--param", f"model_uri=s3://key:it's{SECRET}@bucket/m"),
        field="model_uri: s3://... carries credentials", params=True),
    row("run-lora-token-as-user", *run_local("--param", f'lora_adapters={{"a": "hf://{SECRET}@org/a"}}'),
        field="lora_adapters.a: hf://... carries credentials", params=True),
    row("deploy-model-uri-token-as-user", *deploy(uri=f"oci://{SECRET}@quay.io/org/model@{DIGEST}"),
        field="--model-uri: oci://... carries credentials"),
    row("deploy-template-model-uri-token", *deploy("--template", "llmisvc-token.yaml"),
        field="deploy_config.template: carries credentials"),
    row("deploy-kubeconfig-server-credentials", "deploy", "--name", "llm", "--model-uri", URI, "--out-file",
        "applied.yaml", "--kubeconfig", "kubeconfig-creds", field="kubeconfig: https://... carries credentials"),
    row("run-deploy-config-env-url-token-as-user", *run_local(
        "--param", f'deploy_config={{"env": {{"SRC": "https://{SECRET}@host/x"}}}}'),
        field="deploy_config.env.SRC: carries credentials", params=True),
    row("run-deploy-config-secret-env-token", *run_local(
        "--param", f'deploy_config={{"secret_env": {{"HF_TOKEN": "{TOKEN_LIKE}"}}}}'),
        field="deploy_config.secret_env.HF_TOKEN: (a value that looks like a credential, not shown)", params=True),
    row("run-deploy-config-env-token", *run_local("--param", f'deploy_config={{"env": {{"HF_TOKEN": "{TOKEN_LIKE}"}}}}'),
        field="deploy_config.env.HF_TOKEN: looks like a credential", params=True),
    row("deploy-params-secret-env-token", *deploy("--params-file", "secret-env-token.yaml"),
        field="deploy_config.secret_env.HF_TOKEN: (a value that looks like a credential, not shown)"),
    row("deploy-params-pull-secret-token", *deploy("--params-file", "pull-secret-token.yaml"),
        field="deploy_config.image_pull_secrets: (a value that looks like a credential, not shown)"),
    # --- round 3 (issue 34): a long word is redacted in linear time (the quadratic redaction took minutes) --
    row("run-model-uri-120k-word", *run_local("--param", "model_uri=hf://org/" + "a" * 120_000 + ":x"),
        field="model_uri", params=True),
    row("check-kfp-host-32k-userinfo", "check", "--kfp-host", "http://x:" + "a" * 32_000 + f"{SECRET}@h",
        field="--kfp-host: http://... carries credentials"),
    # --- issue 35: workload fingerprints (one line each, before any GPU work) ---------------------
    row("workload-trace-unsorted", *workload("trace-unsorted.jsonl"), field="SRC: row 2: timestamps are not sorted"),
    row("workload-trace-negative-timestamp", *workload("trace-negative.jsonl"),
        field="SRC: row 1: timestamp -0.5 is negative"),
    row("workload-trace-beyond-context", *workload("trace.jsonl", "--max-model-len", "44"),
        field="max_model_len: row 1: 40 input + 5 output tokens exceed the model's context of 44"),
    row("workload-block-size-mismatch", *workload("trace.jsonl", block="512"),
        field="block_size: row 1: 40 input tokens in blocks of 512 are 1 blocks, the trace has 3 hash_ids"),
    row("workload-block-size-missing", "workload", "fingerprint", "trace.jsonl", "--format", "mooncake",
        field="block_size: the trace has hash_ids but no block size"),
    row("workload-block-size-zero", *workload("trace.jsonl", block="0"), field="--block-size"),
    row("workload-text-in-strict-privacy", *workload("trace-text.jsonl"),
        field="privacy: SRC row 1 carries text (text_input) and the privacy mode is strict"),
    row("workload-chat-in-strict-privacy", "workload", "fingerprint", "chat.jsonl", "--format", "chat",
        "--block-size", "16", field="privacy: chat logs are text and the privacy mode is strict"),
    row("workload-azure-wrong-columns", "workload", "fingerprint", "trace.jsonl", "--format", "azure",
        field="SRC: the Azure CSV has no column 'TIMESTAMP'"),
    row("workload-prometheus-window-reversed", "workload", "fingerprint", DEAD, "--format", "prometheus",
        "--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z", field="--end: the window ends before it starts"),
    row("workload-prometheus-no-window", "workload", "fingerprint", DEAD, "--format", "prometheus",
        field="--start: a Prometheus fingerprint needs a window"),
    row("workload-prometheus-unreachable", "workload", "fingerprint", DEAD, "--format", "prometheus", "--start", "0",
        "--end", "600", field="prometheus: http://127.0.0.1:9 is unreachable", code=3),
    row("workload-prometheus-credentials", "workload", "fingerprint", f"http://bob:{SECRET}@127.0.0.1:9", "--format",
        "prometheus", "--start", "0", "--end", "600", field="prometheus: http://... carries credentials"),
    row("workload-render-edited-fingerprint", "workload", "render", "fingerprint-edited.json", "--out-file", "r.jsonl",
        field="FINGERPRINT: fingerprint-edited.json: its digest does not match its content"),
    row("workload-fidelity-tolerance-above-1", "workload", "fidelity", "fingerprint.json", "--guidellm", "golden.json",
        "--tolerance", '{"ks_input": 2}', field="workload.tolerance.ks_input"),
    # --- issue 37: verify-model and deploy_config.attestation (the refusals of twins: tests/test_attestation.py)
    row("verify-model-uri-tag", "verify-model", "oci://quay.io/org/m:v1", "--key", "public.pem",
        field="uri: oci://quay.io/org/m:v1 uses the mutable tag"),
    row("verify-model-key-missing", "verify-model", URI, "--key", "nope.pub", field="--key: nope.pub is not a file"),
    row("verify-model-key-not-pem", "verify-model", URI, "--key", "junk.pub", field="--key: is not a PEM public key"),
    row("verify-model-key-none", "verify-model", URI, field="--key: is required"),
    row("verify-model-not-a-layout", "verify-model", f"oci:///nonexistent-shipyard-layout@{DIGEST}", "--key", "public.pem",
        field="/nonexistent-shipyard-layout: is not an OCI image layout"),
    row("verify-model-max-age-zero", "verify-model", URI, "--key", "public.pem", "--max-age", "0", field="--max-age"),
    row("verify-model-files-not-a-folder", "verify-model", URI, "--key", "public.pem", "--files", "no-such-folder",
        field="--files: no-such-folder is not a folder"),
    row("verify-model-uri-credentials", "verify-model", f"oci://u:{SECRET}@quay.io/org/m@{DIGEST}", "--key", "public.pem",
        field="uri: oci://... carries credentials"),
    row("run-deploy-config-attestation-require-text",
        *run_local("--param", 'deploy_config={"attestation": {"require": "no"}}'),
        field="deploy_config.attestation.require", params=True),
    row("run-deploy-config-attestation-unknown", *run_local("--param", 'deploy_config={"attestation": {"keys": "k"}}'),
        field="deploy_config.attestation.keys", params=True),
    row("deploy-attestation-key-missing", *deploy("--params-file", "att-key-missing.yaml"),
        field="deploy_config.attestation.key: nope.pub is not a file"),
    # production moves only to a version whose attestations verify (`alias set ... production`, `alias rollback`)
    row("alias-set-production-key-missing", "alias", "set", "tiny", "production", "1", "--key", "nope.pub",
        field="--key: nope.pub is not a file"),
    row("alias-set-production-key-not-pem", "alias", "set", "tiny", "production", "1", "--key", "junk.pub",
        field="--key: is not a PEM public key"),
    row("alias-set-production-key-none", "alias", "set", "tiny", "production", "1",
        field="--key: is required to check the attestations before production moves"),
    row("alias-set-production-key-and-no-check", "alias", "set", "tiny", "production", "1", "--key", "public.pem",
        "--no-attestation-check", field="--no-attestation-check: contradicts --key"),
    row("alias-set-staging-key", "alias", "set", "tiny", "staging", "1", "--key", "public.pem",
        field="--key: only applies when production moves"),
    row("alias-set-staging-no-check", "alias", "set", "tiny", "staging", "1", "--no-attestation-check",
        field="--no-attestation-check: only applies when production moves"),
    row("alias-rollback-key-missing", "alias", "rollback", "tiny", "--key", "nope.pub",
        field="--key: nope.pub is not a file"),
    row("alias-rollback-key-none", "alias", "rollback", "tiny",
        field="--key: is required to check the attestations before production moves"),
    row("alias-rollback-key-and-no-check", "alias", "rollback", "tiny", "--key", "public.pem",
        "--no-attestation-check", field="--no-attestation-check: contradicts --key"),
    row("unknown-command", "deplyo", field="deplyo"),
    row("unknown-top-flag", "--verbose", field="--verbose"),
]


ES_QA = [{"id": "q1", "prompt": "Which city is the capital of Peru?", "reference": "Lima"},
         {"id": "q2", "prompt": "Which city is the capital of Chile?", "reference": "Santiago"},
         {"id": "q3", "prompt": "Which city is the capital of Spain?", "reference": "Madrid"}]


def _jsonl(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _trace(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


#: a Mooncake row at block size 16 (40 tokens: 3 blocks)
TRACE_ROW = {"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}


def _fingerprints() -> dict[str, str]:
    """A real fingerprint file and the same with one figure edited by hand (its digest then lies)."""
    from shipyard.benchmarking.workload import TraceRequest, build_fingerprint

    fp = build_fingerprint([TraceRequest(0, 40, 5, [1, 2, 3]), TraceRequest(1, 40, 5, [1, 2, 3])],
                           source="mooncake", block_size=16)
    edited = dict(fp.data, slo_class="batch")
    return {"fingerprint.json": fp.to_json(), "fingerprint-edited.json": json.dumps(edited)}
def _public_pem() -> str:
    """A real Ed25519 public key (PEM), for the rows that get past the key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _files() -> dict[str, str]:
    return {
        **_fingerprints(),
        "trace.jsonl": _trace(TRACE_ROW, {**TRACE_ROW, "timestamp": 1000}),
        "trace-unsorted.jsonl": _trace({**TRACE_ROW, "timestamp": 2000}, {**TRACE_ROW, "timestamp": 1000}),
        "trace-negative.jsonl": _trace({**TRACE_ROW, "timestamp": -500}),
        "trace-text.jsonl": _trace({**TRACE_ROW, "text_input": "my customer's question"}),
        "chat.jsonl": _trace({"messages": [{"role": "user", "content": "hi"}], "output": "hello", "timestamp": 0}),
        # eval_sets rows: three good qa rows, and one mistake per file
        "es-qa.jsonl": _jsonl(ES_QA),
        "es-bad-row.jsonl": _jsonl([ES_QA[0], {"prompt": "Which city is the capital of Chile?"}]),
        "es-empty.jsonl": "\n",
        "es-dup-ids.jsonl": _jsonl([ES_QA[0], ES_QA[1], {**ES_QA[2], "id": "q1"}]),
        "es-rag-no-ctx.jsonl": _jsonl([{"user_input": "Where does Peru's government sit?", "retrieved_contexts": [],
                                        "reference": "Lima"}]),
        "es-rubric.jsonl": _jsonl([{"prompt": "Explain 2 plus 2.", "guideline": "The sum is 4."}]),
        # the built-in calibration text quotes "Q: What is the capital of France? A: Paris."
        "es-leak.jsonl": _jsonl([{"prompt": "What is the capital of France?", "reference": "Paris"}, ES_QA[0]]),
        "public.pem": _public_pem(),
        "junk.pub": "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n",
        "att-key-missing.yaml": "attestation: {key: nope.pub}\n",
        "config.json": json.dumps(LLAMA),
        "bad.json": '{"hidden_size": ',
        "list.json": "[1, 2]",
        "noarch.json": '{"model_type": "llama"}',
        "file.txt": "a file, not a folder\n",
        "list.yaml": "- just\n- a list\n",
        "bad.yaml": "key: [unclosed\n",
        "typo.yaml": "replicaz: 2\n",
        "llmisvc.yaml": "apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceService\n"
                        "metadata: {name: llm}\nspec: {model: {uri: 'hf://o/m'}, replicas: 2}\n",
        "llmisvc-typo.yaml": "apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceService\n"
                             "metadata: {name: llm}\nspec: {model: {uri: 'hf://o/m'}, replicaz: 2}\n",
        "llmisvc-noname.yaml": "apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceService\n"
                               "metadata: {}\nspec: {model: {uri: 'hf://o/m'}}\n",
        "seed-text.yaml": "seed: abc\n",
        "samples-list.yaml": "num_calibration_samples: [1, 2]\n",
        "null.yaml": "dry_run:\n",
        "recipes-mapping.yaml": "recipes: {scheme: W8A8}\n",
        "dup.yaml": "dry_run: true\nseed: 1\ndry_run: false\n",
        "dup.json": '{"seed": 1, "seed": 2}',
        "dup-deploy.yaml": "replicas: 1\nreplicas: 3\n",
        "bomb.yaml": f"slo: {BOMB}\n",
        "deep.yaml": "eval_config: " + "[" * 20_000 + "]" * 20_000 + "\n",
        "huge.yaml": "seed: " + "7x" * 3_000_000 + "\n",  # 6 MB: under the 8 MiB a text file may hold
        "huge-key.yaml": "k" * 3_000_000 + ": 1\n",
        "bom.yaml": "\ufeffseed: abc\n",
        "scaling-list.yaml": "scaling: [1, 2]\n",
        "apply-poll-text.yaml": "apply: {poll_s: abc}\n",
        "apply-poll-true.yaml": "apply: {poll_s: true}\n",
        "apply-list.yaml": "apply: [1]\n",
        "cluster-typo.yaml": "gpuu: {accelerator_count: 1}\n",
        "cluster-claims.yaml": "pvc: {claims: models-claim, steps: [resolve-model]}\n",
        "cluster-secctx-root.yaml": "security_context: {run_as_user: 0, run_as_non_root: true}\n",
        "cluster-secctx-text.yaml": "security_context: {run_as_non_root: 'yes'}\n",
        "recipe-typo.yaml": "recipes:\n  - |\n    quant_stage:\n      quant_modifiers:\n        GPTQModifer: {scheme: W4A16}\n",
        "recipe-dup.yaml": "recipes:\n  - |\n    quant_stage:\n      quant_modifiers:\n        GPTQModifier: {scheme: W4A16}\n"
                           "        GPTQModifier: {scheme: W8A8}\n",
        "kv-heads-zero.json": json.dumps({**LLAMA, "num_key_value_heads": 0}),
        "heads-negative.json": json.dumps({**LLAMA, "num_attention_heads": -32}),
        "heads-bool.json": json.dumps({**LLAMA, "num_attention_heads": True}),
        "experts-negative.json": json.dumps({**LLAMA, "num_local_experts": -5}),
        "max-pos-negative.json": json.dumps({**LLAMA, "max_position_embeddings": -1}),
        "llmisvc-token.yaml": "apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceService\n"
                              f"metadata: {{name: llm}}\nspec: {{model: {{uri: 'hf://{SECRET}@o/m'}}}}\n",
        "vllm-decode-max-num.yaml": "decode: {vllm_args: {max-num: 8}}\n",
        "secret-env-token.yaml": f"secret_env: {{HF_TOKEN: {TOKEN_LIKE}}}\n",
        "pull-secret-token.yaml": f"image_pull_secrets: [{TOKEN_LIKE}]\n",
        "kubeconfig-creds": "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                            f"clusters: [{{name: c, cluster: {{server: 'https://{SECRET}@127.0.0.1:9'}}}}]\n"
                            "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n",
        "golden.json": json.dumps({"schema": "shipyard.golden/v1", "answers": [{"prompt": "p", "text": "t"}]}),
        "empty-golden.json": json.dumps({"schema": "shipyard.golden/v1", "answers": []}),
        # a champion whose benchmark ran (shipyard watch's envelope)
        "candidate.json": json.dumps({"schema": "shipyard.candidate/v1", "recipe": "w8a8-int8", "passed": True,
                                      "reason": "passed", "levels": [{"name": "constant@1", "nominal_load": 1.0,
                                                                      "requests_per_s": 1.0, "ttft_p99_ms": 80.0,
                                                                      "itl_p99_ms": 20.0, "error_rate": 0.0}]}),
        "kubeconfig-not-yaml": "clusters: [{name: c\n",
        "cluster-ns-slash.yaml": _layout(pipeline_namespace="kubeflow/secrets"),
        "cluster-ns-query.yaml": _layout(serving_namespace="shipyard?watch=1"),
        "cluster-other-ns.yaml": _layout() + "  other: {pipeline_namespace: '..'}\n",
        "cluster-sa-at.yaml": _layout(service_account="runner@x"),
        "cluster-secret-token.yaml": _layout() + f"secrets: {{{TOKEN_LIKE}: {{env: {{}}}}}}\n",
        "cluster-secret-path.yaml": _layout() + "secrets: {'../nodes': {env: {}}}\n",
        "kubeconfig-a-list": "- 1\n- 2\n",
        "probe-period-int32.yaml": "probes: {readiness: {period_seconds: 99999999999}}\n",
        "probe-startup-int32.yaml": "probes: {startup_seconds: 99999999999999, period_seconds: 1}\n",
        "cpu-negative.yaml": "resources: {limits: {cpu: '-4'}}\n",
        "vllm-tp-alias.yaml": "vllm_args: {'-tp': 2}\n",
        "vllm-port-equals.yaml": "vllm_args: {'--port=8000': true}\n",
        "vllm-decode-pp.yaml": "decode: {vllm_args: {'-pp': 2}}\n",
        "memory-1e400.yaml": "resources: {requests: {memory: '1e400'}}\n",
        "sa-too-long.yaml": f"service_account: {'a' * 254}\n",
        "kubeconfig": "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                      "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
                      "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n",
    }


def _layout(**entry: str) -> str:
    """A cluster config whose one layout ``l`` has ``entry`` over good values (``layouts:`` last)."""
    good = {"pipeline_namespace": "kubeflow", "service_account": "pipeline-runner", "serving_namespace": "shipyard",
            "tracking_uri": "http://mlflow.kubeflow.svc.cluster.local:5000", **entry}
    return "layout: l\nlayouts:\n  l: " + json.dumps(good) + "\n"


def _mount(target: Path, options: str) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, set[str]]]:
    """The folder every row runs in: input files, an empty folder, a read-only mount and a full disk."""
    base = tmp_path_factory.mktemp("bad-input")
    for name, text in _files().items():
        (base / name).write_text(text)
    (base / "emptydir").mkdir()
    (base / "lora-adapter").mkdir()  # a peft adapter folder's shape, for the lora_adapters rows
    (base / "lora-adapter" / "adapter_config.json").write_text('{"r": 8, "peft_type": "LORA"}')
    (base / "champion-base-creds").mkdir()  # a selection whose recorded base model carries a password
    (base / "champion-base-creds" / "selection.json").write_text(json.dumps({
        "winner": "w8a8-int8", "candidates": [json.loads((base / "candidate.json").read_text())],
        "base_model": {"uri": f"s3://bob:{SECRET}@bucket/base"}}))
    (base / "utf16.yaml").write_bytes("seed: abc\r\n".encode("utf-16"))  # as PowerShell's Out-File writes it
    (base / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (base / "latin1.yaml").write_bytes("experiment: caf\u00e9\n".encode("latin-1"))
    os.mkfifo(base / "fifo.yaml")  # nothing ever writes to it: reading it would wait forever
    (base / "big.yaml").write_bytes(b"# a log pasted by mistake\n" * 360_000)  # 9 MiB, over the 8 MiB bound
    mounts, have = [], set()
    ro, full = base / "ro", base / "full"
    ro.mkdir()
    full.mkdir()
    if _mount(ro, "ro,size=64k"):
        mounts.append(ro)
        have.add("ro")
    elif os.geteuid() != 0:
        ro.chmod(0o555)  # a non-root user cannot write there either
        have.add("ro")
    if _mount(full, "size=64k"):
        mounts.append(full)
        with contextlib.suppress(OSError), open(full / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        have.add("full")
    try:
        yield base, have
    finally:
        for mount in mounts:
            subprocess.run(["umount", str(mount)], check=False)
        ro.chmod(0o755)


def _snapshot(base: Path) -> dict[str, int]:
    return {str(p.relative_to(base)): (p.stat().st_size if p.is_file() else -1) for p in base.rglob("*")}


def cli_env() -> dict[str, str]:
    """The environment every row runs in; SHIPYARD_DEBUG=1 lets an unexpected exception show its traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_PIPELINES_")}
    env.update(SHIPYARD_DEBUG="1", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    env.pop(ALLOW_ENV, None)
    return env


def shipyard(cwd: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the CLI as a user does: ``python -m shipyard.cli.main ARGV`` in its own process."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", *argv], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, time.monotonic() - started


class ForkedCli:
    """The same command lines, each in its own process forked from one that imported the CLI once
    (``tests/cli_forkserver.py``): a row costs its own work, not 1.5-3 s of imports."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.server = subprocess.Popen([sys.executable, str(Path(__file__).parent.parent / "cli_forkserver.py")],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=cli_env(), text=True,
                                       cwd=scratch)

    def run(self, cwd: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
        out, err = self.scratch / "stdout", self.scratch / "stderr"
        assert self.server.stdin and self.server.stdout
        self.server.stdin.write(json.dumps({"argv": list(argv), "cwd": str(cwd), "stdout": str(out),
                                            "stderr": str(err), "timeout": 120}) + "\n")
        self.server.stdin.flush()
        answer = json.loads(self.server.stdout.readline())
        proc = subprocess.CompletedProcess(list(argv), answer["code"], out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))
        return proc, answer["seconds"]

    def close(self) -> None:
        if self.server.stdin:
            self.server.stdin.close()
        self.server.wait(timeout=30)


@pytest.fixture(scope="module")
def forked_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkedCli]:
    cli = ForkedCli(tmp_path_factory.mktemp("cli-forkserver"))
    yield cli
    cli.close()


ALLOW_ENV = "SHIPYARD_ALLOW_MUTABLE_TAG"


def test_rows_are_distinct() -> None:
    assert len({r.id for r in ROWS}) == len(ROWS)
    assert len({r.argv for r in ROWS}) == len(ROWS)
    assert len(ROWS) >= 120


@pytest.mark.parametrize("case", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_is_one_line(case: Row, workspace: tuple[Path, set[str]], forked_cli: ForkedCli) -> None:
    base, have = workspace
    missing = case.needs - have
    if missing:
        pytest.skip(f"needs a tmpfs mount ({', '.join(sorted(missing))}): run as root")
    before = _snapshot(base)
    proc, seconds = forked_cli.run(base, *case.argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("shipyard: error: "), lines[0]
    assert case.field in lines[0], lines[0]
    assert proc.returncode == case.code, (proc.returncode, lines[0])
    assert len(lines[0]) <= MAX_LINE, f"an error line of {len(lines[0])} characters"
    for secret in SECRETS:
        assert secret not in proc.stderr + proc.stdout, f"{secret!r} was printed"
    assert _snapshot(base) == before, "the command left files behind"
    if case.params:
        # before any step: a step (resolve, compress, vLLM) takes minutes; checking a parameter takes
        # seconds however loaded the machine (this bound is a hang guard, not a speed test)
        assert seconds < 60, f"a bad parameter took {seconds:.1f} s to be rejected"


#: one row in every SAMPLE_EVERY, spread over the commands, also runs as ``python -m shipyard.cli.main``
SAMPLE_EVERY = 25


@pytest.mark.parametrize("case", ROWS[::SAMPLE_EVERY], ids=[r.id for r in ROWS[::SAMPLE_EVERY]])
def test_a_forked_row_prints_what_a_fresh_process_prints(case: Row, workspace: tuple[Path, set[str]],
                                                         forked_cli: ForkedCli) -> None:
    """The fork server is only a faster way to start the same CLI: a fresh interpreter prints the
    same error line and exits with the same status."""
    base, have = workspace
    if case.needs - have:
        pytest.skip("needs a tmpfs mount: run as root")
    forked, _ = forked_cli.run(base, *case.argv)
    fresh, _ = shipyard(base, *case.argv)
    assert (forked.returncode, forked.stderr, forked.stdout) == (fresh.returncode, fresh.stderr, fresh.stdout)


def test_copy_tree_on_a_full_disk_is_one_line_and_leaves_nothing(workspace: tuple[Path, set[str]],
                                                                 tmp_path: Path) -> None:
    """Where models are copied (resolve, the eval cache): ENOSPC names the path and the fix, not a
    list of shutil errors, and no partial folder stays."""
    from shipyard.core.errors import ShipyardError
    from shipyard.core.files import copy_tree

    base, have = workspace
    if "full" not in have:
        pytest.skip("needs a tmpfs mount: run as root")
    src = tmp_path / "model"
    src.mkdir()
    for i in range(3):
        (src / f"shard-{i}.safetensors").write_bytes(os.urandom(40_000))
    before = _snapshot(base)
    with pytest.raises(ShipyardError) as err:
        copy_tree(src, base / "full" / "model", field="model_uri")
    line = str(err.value)
    assert "\n" not in line and line.startswith("model_uri: no space left on the device to write ")
    assert "free space" in line and "shard-" in line
    assert isinstance(err.value, OSError) and err.value.errno == 28
    assert _snapshot(base) == before


def test_mutable_tags_need_an_explicit_yes(monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.core.errors import ShipyardError
    from shipyard.models.resolve import parse_model_uri

    with pytest.raises(ShipyardError, match="mutable tag 'v1'"):
        parse_model_uri("oci://quay.io/org/m:v1")
    assert parse_model_uri("oci://quay.io/org/m:v1", allow_mutable_tag=True).location == "quay.io/org/m:v1"
    monkeypatch.setenv(ALLOW_ENV, "1")
    assert parse_model_uri("oci://quay.io/org/m:v1").scheme == "oci"
    assert parse_model_uri(f"oci:///abs/layout@{DIGEST}").location == f"/abs/layout@{DIGEST}"


#: what the one line must name for each URI variable, beside the variable: the fix (where the credentials go)
ENV_URI_FIXES = {"MLFLOW_TRACKING_URI": "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
                 "AWS_ENDPOINT_URL_S3": "put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                 "AWS_ENDPOINT_URL": "put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"}


@pytest.mark.parametrize(("argv", "name", "uri"), [
    (("alias", "show", "tiny"), "MLFLOW_TRACKING_URI", f"http://{SECRET}@mlflow.example:5000"),
    (run_local(), "MLFLOW_TRACKING_URI", f"https://bob:it's{SECRET}@mlflow.example"),
    (run_local("--param", "model_uri=s3://bucket/model"), "AWS_ENDPOINT_URL_S3", f"http://{AWS_KEY_ID}:{SECRET}@127.0.0.1:9"),
    (run_local("--param", "calibration_dataset=s3://bucket/calib.jsonl"), "AWS_ENDPOINT_URL_S3",
     f"{AWS_KEY_ID}:it's{SECRET}@minio.example:9000"),  # a bare host:port (https) with a password with '
    (run_local("--param", "model_uri=s3://bucket/model"), "AWS_ENDPOINT_URL", f"https://{SECRET}@minio.example"),
    (deploy("--template", "s3://bucket/llmisvc.yaml"), "AWS_ENDPOINT_URL_S3", f"http://{AWS_KEY_ID}:{SECRET}@127.0.0.1:9"),
], ids=["alias-show-token-as-user", "run-local-password-with-quote", "run-local-s3-model-key-and-secret",
        "run-local-s3-calibration-bare-password-with-quote", "run-local-s3-aws-endpoint-url-token-as-user",
        "deploy-s3-template-key-and-secret"])
def test_a_uri_from_the_environment_that_carries_credentials_is_one_line(
        argv: tuple[str, ...], name: str, uri: str, tmp_path: Path) -> None:
    """MLFLOW_TRACKING_URI (the Secret shipyard-mlflow's, or the shell's) or the S3 endpoint
    (AWS_ENDPOINT_URL_S3, the Secret shipyard-s3's, or AWS_ENDPOINT_URL) with a user name, password
    or token: the same one-line refusal as ``--param tracking_uri`` or an s3:// URI with credentials,
    naming the variable and where the credentials go, before any network call and before anything
    is written. The tracking URI went to the network ("Name or service not known" after 5
    attempts); the S3 endpoint ran the pipeline until pin-model failed with minio's "username in
    endpoint is not allowed" as "cannot reach S3", leaving the work dir and an MLflow run behind."""
    env = {**cli_env(), name: uri}
    for other in ("KFP_MLFLOW_CONFIG", *({"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "SHIPYARD_S3_ENDPOINT"} - {name})):
        env.pop(other, None)
    proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and proc.returncode == 2, proc.stderr
    assert lines[0].startswith(f"shipyard: error: {name}: http") and "carries credentials (not shown)" \
        in lines[0] and ENV_URI_FIXES[name] in lines[0], lines[0]
    for secret in SECRETS:
        assert secret not in proc.stderr + proc.stdout
    assert not any(tmp_path.iterdir()), "the command left files behind"


@pytest.mark.parametrize("value", ["abc", "0"])
@pytest.mark.parametrize(("name", "argv"), [
    ("SHIPYARD_KFP_TIMEOUT_S", ("runs", "--host", DEAD)),
    ("SHIPYARD_S3_TIMEOUT_S", deploy("--template", "s3://bucket/llmisvc.yaml")),
    ("SHIPYARD_CHECK_API_TIMEOUT_S", ("check", "--no-s3")),
], ids=["kfp", "s3", "check"])
def test_a_bad_deadline_setting_is_one_line_before_any_call(name: str, argv: tuple[str, ...], value: str,
                                                            tmp_path: Path) -> None:
    """The settings that bound each call to a service (issue 34): a value that is not a number of
    seconds is one line naming the variable (exit 2), before anything is contacted."""
    env = {**cli_env(), name: value, "AWS_ENDPOINT_URL_S3": DEAD, "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
           "AWS_SECRET_ACCESS_KEY": SECRET}
    proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and proc.returncode == 2, proc.stderr
    assert lines[0].startswith(f"shipyard: error: {name}: "), lines[0]


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan"])
def test_a_bad_registry_deadline_is_one_line(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.core.errors import ShipyardError
    from shipyard.oci.client import RegistryClient

    monkeypatch.setenv("SHIPYARD_REGISTRY_TIMEOUT_S", value)
    with pytest.raises(ShipyardError) as err:
        RegistryClient("127.0.0.1:9", "team/model")
    assert err.value.field == "SHIPYARD_REGISTRY_TIMEOUT_S" and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan"])
@pytest.mark.parametrize("call", ["pin", "resolve", "calibration"])
def test_a_bad_hub_deadline_is_one_line_before_any_call(value: str, call: str, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """``SHIPYARD_HF_TIMEOUT_S`` (each call to the Hugging Face Hub, issue 34): a value that is not
    a number of seconds is one line naming it, before huggingface_hub (or datasets, for a hub
    ``calibration_dataset``) is imported or the hub contacted."""
    from shipyard.compression.calibration import load_calibration_texts
    from shipyard.core.errors import ShipyardError
    from shipyard.models.hub import ENV_TIMEOUT
    from shipyard.models.resolve import resolve_model
    from shipyard.steps.pin import pin_model

    monkeypatch.setenv(ENV_TIMEOUT, value)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", DEAD)
    with pytest.raises(ShipyardError) as err:
        if call == "calibration":
            load_calibration_texts("org/name", text_column="text", num_samples=4, seed=0, tokenizer=None)
        else:
            pin_model("hf://org/name") if call == "pin" else resolve_model("hf://org/name", str(tmp_path / "m"))
    assert err.value.field == ENV_TIMEOUT == "SHIPYARD_HF_TIMEOUT_S" and "\n" not in str(err.value)
    assert not (tmp_path / "m").exists()
