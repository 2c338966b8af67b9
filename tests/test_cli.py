"""The CLI gives one-line errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_tool

from shipyard.pipelines import get_pipeline
from shipyard.run.local import parse_param, resolve_params


def _shipyard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shipyard.cli.main", *args], capture_output=True, text=True, check=False)


def test_unknown_pipeline_parameter_is_one_line(tmp_path: Path) -> None:
    proc = _shipyard("run", "--local", "--work-dir", str(tmp_path), "--param", "no_such_param=1")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("shipyard: error: --param: unknown parameter(s) no_such_param")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_run_requires_local(tmp_path: Path) -> None:
    proc = _shipyard("run", "--work-dir", str(tmp_path))
    assert proc.returncode == 2 and "--local" in proc.stderr


def test_unknown_pipeline(tmp_path: Path) -> None:
    proc = _shipyard("run", "--local", "nope", "--work-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "pipeline: unknown pipeline 'nope'" in proc.stderr


def test_params_are_read_as_yaml_and_merged(tmp_path: Path) -> None:
    assert parse_param("recipes=[w8a8-int8, w4a16]") == ("recipes", ["w8a8-int8", "w4a16"])
    assert parse_param("num_calibration_samples=8") == ("num_calibration_samples", 8)
    params_file = tmp_path / "p.yaml"
    params_file.write_text("seed: 7\nmax_seq_length: 128\n")
    merged = resolve_params("optimize-and-deploy", str(params_file), ["seed=9"])
    assert merged["seed"] == 9 and merged["max_seq_length"] == 128
    assert merged["model_uri"] == "embedded://smollm2-135m-instruct"
    # the rehearsal reads the file once (it may be standard input) and passes the mapping it read
    assert resolve_params("optimize-and-deploy", {"seed": 7, "max_seq_length": 128}, ["seed=9"]) == merged
    with pytest.raises(Exception, match="is not key=value"):
        parse_param("novalue")


def test_bad_params_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    proc = _shipyard("run", "--local", "--work-dir", str(tmp_path), "--params-file", str(bad))
    assert proc.returncode == 2 and "--params-file" in proc.stderr and "Traceback" not in proc.stderr


# --- output conventions, exit codes, closed pipes, completion ----------------------------------------

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
DIGEST_URI = "oci://registry.example/models/qwen@sha256:" + "a" * 64


def _in(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shipyard.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          check=False, env=env)


def test_output_formats_print_objects_to_stdout(tmp_path: Path) -> None:
    import json

    import yaml

    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    as_json = json.loads(_in(tmp_path, "plan", "config.json", "-o", "json").stdout)
    as_yaml = yaml.safe_load(_in(tmp_path, "plan", "config.json", "--output", "yaml").stdout)
    assert as_json == as_yaml and as_json["fits"] is True and as_json["estimated"] is False
    assert json.loads(_in(tmp_path, "plan", "config.json", "--json").stdout) == as_json  # the old spelling
    assert _in(tmp_path, "plan", "config.json").stdout.startswith("model: llama")

    manifest = _in(tmp_path, "deploy", "--dry-run", "--name", "llm", "--model-uri", DIGEST_URI, "-o", "yaml")
    assert manifest.returncode == 0, manifest.stderr
    assert yaml.safe_load(manifest.stdout)["kind"] == "LLMInferenceService"
    as_object = json.loads(_in(tmp_path, "deploy", "--dry-run", "--name", "llm", "--model-uri", DIGEST_URI,
                               "-o", "json").stdout)
    assert as_object == yaml.safe_load(manifest.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"], "-o yaml must not write a file named yaml"

    written = _in(tmp_path, "deploy", "--dry-run", "--name", "llm", "--model-uri", DIGEST_URI, "--out-file",
                  "out/llm.yaml")
    assert written.returncode == 0 and "DryRun" in written.stdout and "out/llm.yaml" in written.stdout
    path = tmp_path / "out" / "llm.yaml"
    assert yaml.safe_load(path.read_text()) == as_object
    assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["llm.yaml"], "no temporary file left"

    report = json.loads(_in(tmp_path, "validate", "-o", "json", str(path)).stdout)
    assert report == [{"file": str(path), "valid": True, "problems": []}]
    plan_file = tmp_path / "plan.yaml"
    assert _in(tmp_path, "plan", "config.json", "-o", "yaml", "--out-file", str(plan_file)).returncode == 0
    assert yaml.safe_load(plan_file.read_text()) == as_json and plan_file.stat().st_mode & 0o777 == 0o644


def test_validate_takes_a_folder_like_kubectl_f(tmp_path: Path) -> None:
    """``validate -f DIR`` (and a folder as FILE): every *.yaml, *.yml and *.json in it, sorted; -R
    for subfolders; other files are not manifests; an invalid one makes the exit status 1."""
    import json

    good = ("apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceService\nmetadata: {name: llm}\n"
            "spec: {model: {uri: 'hf://o/m'}}\n")
    folder = tmp_path / "manifests"
    (folder / "nested").mkdir(parents=True)
    (folder / "a.yaml").write_text(good)
    (folder / "b.yml").write_text(good.replace("llm}", "llm-b}"))
    (folder / "c.json").write_text(json.dumps({"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                                               "metadata": {"name": "llm-c"}, "spec": {"model": {"uri": "hf://o/m"}}}))
    (folder / "README.md").write_text("not a manifest\n")
    (folder / "nested" / "d.yaml").write_text(good.replace("model:", "modle:"))
    report = json.loads(_in(tmp_path, "validate", "-f", "manifests", "-o", "json").stdout)
    assert [r["file"] for r in report] == [f"manifests/{n}" for n in ("a.yaml", "b.yml", "c.json")]
    assert all(r["valid"] for r in report)
    assert _in(tmp_path, "validate", "manifests").stdout.splitlines() == [
        "ok manifests/a.yaml", "ok manifests/b.yml", "ok manifests/c.json"]
    deep = _in(tmp_path, "validate", "-R", "-f", "manifests")
    assert deep.returncode == 1 and "INVALID" in deep.stdout and "nested/d.yaml" in deep.stdout


def test_closed_pipe_is_quiet_with_exit_141(tmp_path: Path) -> None:
    import json

    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    proc = subprocess.Popen([sys.executable, "-m", "shipyard.cli.main", "plan", "config.json", "-o", "json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before shipyard writes, as with `| head -1` on a long output
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""
    shell = subprocess.run(["bash", "-c", f"{sys.executable} -m shipyard.cli.main plan config.json -o yaml | head -1"],
                           cwd=tmp_path, capture_output=True, text=True, check=False)
    assert shell.returncode == 0 and shell.stdout == "model_type: llama\n" and "Traceback" not in shell.stderr


def test_exit_code_table_in_readme_matches_the_code() -> None:
    from shipyard.core import errors
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## CLI", 1)[1].split("\n## ", 1)[0]
    codes = {name: value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    for value in codes.values():
        assert f"| {value} |" in section, f"exit code {value} is not in README's CLI table"
    assert errors.UnreachableError.exit_code == errors.EXIT_UNREACHABLE
    assert errors.ShipyardError.exit_code == errors.EXIT_USAGE


def test_readme_cli_reference_lists_every_command_and_the_kubectl_style_options() -> None:
    """The CLI block names every subcommand of the parser, and the options that mirror kubectl
    (-n on the namespaced commands, validate's -f DIR and -R, submit's -o json|yaml)."""
    from shipyard.cli.main import build_parser

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## CLI", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    lines = {line.split()[1]: line for line in block.splitlines() if line.startswith("shipyard ")}
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) <= set(lines), sorted(set(sub.choices) - set(lines))
    for command in ("check", "deploy", "submit", "schedule", "runs"):
        assert "[-n NS]" in lines[command], command
        options = {o for a in sub.choices[command]._actions for o in a.option_strings}
        assert {"-n", "--namespace"} <= options, command
    assert "-f FILE|DIR" in lines["validate"] and "[-R]" in lines["validate"]
    assert "[-o json|yaml]" in lines["submit"]


def test_unknown_architecture_is_planned_as_an_estimate(tmp_path: Path) -> None:
    import json

    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, "model_type": "frobnicator",
                                                      "architectures": ["FrobForCausalLM"]}))
    proc = _in(tmp_path, "plan", "config.json", "-o", "json")
    assert proc.returncode == 0
    assert proc.stderr.startswith("shipyard: warning: architecture 'frobnicator'") and "ESTIMATED" in proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["estimated"] is True and any("ESTIMATED" in note for note in plan["notes"])
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in LLAMA.items() if k != "model_type"}))
    known = _in(tmp_path, "plan", "config.json", "-o", "json")  # the type comes from architectures
    assert known.stderr == "" and json.loads(known.stdout)["estimated"] is False


def _complete(script: str, *words: str) -> list[str]:
    """Run bash's completion function the way readline does: COMP_WORDS/COMP_CWORD, then read COMPREPLY."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMPREPLY=(); _shipyard\n"
               'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, check=True)
    return sorted(line for line in done.stdout.splitlines() if line)


def test_bash_completion_is_generated_from_the_parser(tmp_path: Path) -> None:
    from shipyard.cli.commands.completion import walk
    from shipyard.cli.main import build_parser
    from shipyard.pipelines import PIPELINES

    registered = subprocess.run(
        ["bash", "--norc", "-c", f"source <({sys.executable} -m shipyard.cli.main completion bash); complete -p shipyard"],
        capture_output=True, text=True, check=True)
    assert registered.stdout.strip() == "complete -F _shipyard shipyard"
    script = _in(tmp_path, "completion", "bash").stdout
    parser = build_parser()
    tree = walk(parser)
    commands = sorted(tree["shipyard"].subcommands)
    assert _complete(script, "shipyard", "") == commands
    assert _complete(script, "shipyard", "pl") == ["plan"]
    for path, node in tree.items():  # every option of every command completes
        assert _complete(script, *path.split(), "-") == sorted(node.options), path
    assert _complete(script, "shipyard", "plan", "-o", "") == ["json", "yaml"]
    assert _complete(script, "shipyard", "deploy", "--output=j") == ["json"]
    assert _complete(script, "shipyard", "plan", "--kv-cache-dtype", "fp8_") == ["fp8_e4m3", "fp8_e5m2"]
    assert _complete(script, "shipyard", "images", "") == ["build"]
    assert _complete(script, "shipyard", "images", "build", "--flavor", "") == ["cpu", "gpu"]
    assert _complete(script, "shipyard", "completion", "") == ["bash", "zsh"]
    assert _complete(script, "shipyard", "run", "--local", "--work-dir", "x", "pro") == ["promote"]
    assert set(PIPELINES) <= set(_complete(script, "shipyard", "submit", ""))
    assert _complete(script, "shipyard", "plan", "--gpu-memory-gib", "") == []  # a number: nothing to offer
    (tmp_path / "compiled-out").mkdir()
    (tmp_path / "compiled-notes.txt").write_text("x")
    assert _complete(script, "shipyard", "compile", "--out", str(tmp_path / "compiled-")) == [
        str(tmp_path / "compiled-out")]
    assert _complete(script, "shipyard", "plan", "--out-file", str(tmp_path / "compiled-")) == sorted(
        [str(tmp_path / "compiled-out"), str(tmp_path / "compiled-notes.txt")])


def test_zsh_completion_through_bashcompinit(tmp_path: Path) -> None:
    import shutil

    if not shutil.which("zsh"):
        require_tool(False, "apt-get install -y zsh")
    script = tmp_path / "shipyard.zsh"
    script.write_text(_in(tmp_path, "completion", "zsh").stdout)
    program = f"""source {script}
[[ $_comps[shipyard] == "_bash_complete -F _shipyard" ]] || exit 3
t() {{ local -a words COMP_WORDS; local CURRENT COMP_CWORD
  words=("$@"); CURRENT=$#; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
  compgen -F _shipyard -- "${{words[CURRENT]}}" | sort | tr '\\n' ' '; echo; }}
t shipyard plan -o ""
t shipyard images build --flavor ""
"""
    done = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True, check=False,
                          env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["json yaml ", "cpu gpu "]


# --- pipeline parameters: natural spellings, types, IR and graph agree ------------------------------


def test_natural_spellings_are_typed_by_the_pipeline() -> None:
    from shipyard.params.specs import coerce_params

    pipeline = get_pipeline("optimize-and-deploy")
    typed = coerce_params(pipeline, {"recipes": "w8a8-int8", "num_calibration_samples": "8", "dry_run": "yes",
                                     "champion_tolerance": "0.01", "namespace": "007", "seed": 7.0,
                                     "slo": {"ttft_p99_ms": 800}, "registry": "", "insecure_registry": "off"})
    assert typed == {"recipes": ["w8a8-int8"], "num_calibration_samples": 8, "dry_run": True,
                     "champion_tolerance": 0.01, "namespace": "007", "seed": 7, "slo": '{"ttft_p99_ms": 800}',
                     "registry": "", "insecure_registry": False}
    assert coerce_params(pipeline, {"recipes": "w8a8-int8, w4a16"})["recipes"] == ["w8a8-int8", "w4a16"]
    assert coerce_params(pipeline, {"recipes": "[w8a8-int8, fp8-dynamic]"})["recipes"] == ["w8a8-int8", "fp8-dynamic"]
    recipe_yaml = "quant_stage:\n  quant_modifiers:\n    QuantizationModifier: {scheme: W8A8}\n"
    assert coerce_params(pipeline, {"recipes": recipe_yaml})["recipes"] == [recipe_yaml]


def test_compiled_and_python_pipelines_declare_the_same_parameters(tmp_path: Path) -> None:
    from shipyard.cli.commands.compile import compile_all
    from shipyard.params.specs import param_specs

    for path in compile_all(str(tmp_path)):
        from_ir = param_specs(path)
        from_graph = param_specs(get_pipeline(path.stem))
        assert {n: (s.type, s.required) for n, s in from_ir.items()} == \
            {n: (s.type, s.required) for n, s in from_graph.items()}, path.stem
    assert param_specs(tmp_path / "promote.yaml")["candidate_uri"].required


def test_redact_never_echoes_passwords() -> None:
    from shipyard.core.errors import ShipyardError, redact

    assert redact("registry=bob:s3cr3t@quay.io") == "registry=***@quay.io"
    assert redact("https://u:p4ss@host/x and oci://quay.io/org/m:v1@sha256:ab") == \
        "https://***@host/x and oci://quay.io/org/m:v1@sha256:ab"
    assert "s3cr3t" not in str(ShipyardError("x", "cannot reach 'bob:s3cr3t@quay.io'"))


def test_minus_o_means_a_format_everywhere() -> None:
    """One convention: every ``-o`` takes json/yaml only; a command that prints objects has it."""
    import argparse

    from shipyard.cli.main import build_parser

    def commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
        found = {path: parser}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.update(commands(sub, f"{path} {name}".strip()))
        return found

    every = commands(build_parser())
    for path, parser in every.items():
        for action in parser._actions:
            if "-o" in action.option_strings:
                assert action.option_strings == ["-o", "--output"] and set(action.choices) <= {"json", "yaml"}, path
    for path in ("plan", "deploy", "validate", "runs"):
        assert any("-o" in a.option_strings for a in every[path]._actions), path
