"""One report format for every gate: a decision, the rule that decided, and one row per check
with the measured value, the threshold, the margin and the rule (Markdown for the KFP UI, HTML, JSON).

:class:`Doc` is the small document model every report is written in (the accuracy gate, the SLO
gate and benchmark report, the candidates report, the champion/challenger gate): headings,
paragraphs, warnings, tables and inline PNG images, rendered to Markdown (the KFP UI, MLflow) and
to one self-contained HTML page (styles inline, images as ``data:`` URLs: nothing is loaded from
the network). Configs are shown as two-column tables (:func:`config_rows`), never as Python reprs.
Every text a report holds goes through :func:`shipyard.core.redact.redact` as it is added (a
config through :func:`~shipyard.core.redact.redact_obj`, which also hides values under
secret-sounding keys), so no rendering shows a credential; images are left as they are.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shipyard.core.redact import redact, redact_obj

#: Percentiles drawn from fewer requests than this get a warning in every report.
MIN_SAMPLES = 100

CSS = (
    # everything wraps (a digest, a long image reference or a code span breaks where it must) so a page
    # fits a narrow frame (MLflow's artifact viewer: about 500 px beside its assistant at a 1280 px window)
    "body{font-family:sans-serif;margin:1.5em;max-width:1300px;color:#222;overflow-wrap:anywhere}"
    "table{border-collapse:collapse;margin:.4em 0 1.4em;max-width:100%}"
    "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "table:not(.wide) td:first-child{min-width:8em}"  # a setting's name is not squeezed by a long value
    ".pass{color:#17803d;font-weight:bold}.fail{color:#b3261e;font-weight:bold}"
    ".warn{background:#fff4e5;border-left:5px solid #ef6c00;padding:.5em .9em;margin:.6em 0}"
    ".note{background:#e8f0fe;border-left:5px solid #1a73e8;padding:.5em .9em;margin:.6em 0}"
    "img{max-width:100%;border:1px solid #eee;margin:.3em .3em 1em 0}code{background:#f4f4f4}"
    "pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap;font-size:12px}"
    # a table of more than WIDE_COLUMNS columns in a narrow frame: one block per row, each cell led by
    # its column's name (the header row is hidden), instead of columns a few letters wide
    "@media (max-width:720px){table.wide,table.wide tbody,table.wide tr,table.wide td{display:block}"
    "table.wide thead{display:none}table.wide tr{border:1px solid #ccc;margin:0 0 .6em;padding:2px 0}"
    "table.wide td{border:none;padding:1px 7px}table.wide td.num{text-align:left}table.wide td:empty{display:none}"
    'table.wide td[data-label]::before{content:attr(data-label) ": ";font-weight:bold;color:#555}}'
)

#: tables with more columns than this are laid out one block per row in a narrow frame (see :data:`CSS`)
WIDE_COLUMNS = 3


def fmt(value: Any, digits: int = 4) -> str:
    """A number for a report: '–' when missing, short otherwise; other values via :func:`cell`."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return cell(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e5:
        return f"{value:.4g}"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def cell(value: Any) -> str:
    """Any config value as table text: ``None`` is "not set", lists are comma-joined, mappings
    ``key=value``; never a Python repr."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return fmt(value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={cell(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple | set):
        return ", ".join(cell(v) for v in value) or "none"
    return str(value)


def config_rows(config: Mapping[str, Any] | None, prefix: str = "") -> list[list[str]]:
    """A (nested) config as ``[key, value]`` rows, nested keys joined with dots."""
    rows: list[list[str]] = []
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            rows += config_rows(value, f"{name}.")
        else:
            rows.append([name, cell(value)])
    return rows


def png_data_url(png: bytes) -> str:
    """A PNG as a ``data:`` URL (the report stays one file, nothing loads from the network)."""
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _md_cell(text: str) -> str:
    value = str(text).replace("|", "\\|").replace("\n", " ")
    return "**FAIL**" if value == "FAIL" else value


def _html_cell(text: str, tag: str = "td", label: str = "", markdown: bool = False) -> str:
    """One table cell; ``label``: its column's name (shown before it in a narrow frame); ``markdown``:
    the text is Markdown (code spans, bold) rather than plain text."""
    value = str(text)
    cls = ""
    if tag == "td":
        if value == "pass" or value.startswith("pass ("):
            cls = " class='pass'"
        elif value.startswith("FAIL") or value.startswith("**FAIL"):
            cls = " class='fail'"
            value = value.replace("**", "")
        elif value and (value[0].isdigit() or value[0] in "-+–x") and len(value) < 24 and " " not in value.strip():
            cls = " class='num'"
    if label:
        cls += f" data-label='{html.escape(label, quote=True)}'"
    return f"<{tag}{cls}>{_md_inline(value) if markdown else html.escape(value)}</{tag}>"


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> str:
    """A table as HTML: the header row in ``<thead>`` (left out when every header is empty), and the
    class ``wide`` on tables of more than :data:`WIDE_COLUMNS` columns (one block per row when narrow)."""
    wide = len(head) > WIDE_COLUMNS
    out = ["<table class='wide'>" if wide else "<table>"]
    if any(str(h).strip() for h in head):
        out.append("<thead><tr>" + "".join(_html_cell(h, "th", markdown=markdown) for h in head) + "</tr></thead>")
    out.append("<tbody>")
    labels = [str(h) if wide else "" for h in head]
    out += ["<tr>" + "".join(_html_cell(c, label=labels[k] if k < len(labels) else "", markdown=markdown)
                             for k, c in enumerate(row)) + "</tr>" for row in rows]
    if not rows:
        out.append(f"<tr><td colspan='{len(head)}'>(none)</td></tr>")
    return "\n".join(out) + "</tbody></table>"


def _md_inline(text: str) -> str:
    """Markdown's inline marks as HTML (escaped): `code`, **bold** and _emphasis_; code spans keep their text."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(part))
        out.append(re.sub(r"(^|[\s(])_([^_]+?)_(?=$|[\s.,;:)])", r"\1<i>\2</i>", part))
    return "".join(out)


def _md_row(line: str) -> list[str]:
    """A Markdown table row's cells (``\\|`` is a pipe inside a cell)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def _md_blocks(lines: list[str]) -> list[str]:
    """Markdown lines (the subset shipyard's reports use) as HTML blocks."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line, j = lines[i], i + 1
        if line.startswith("```"):
            j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("```")), len(lines))
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1:j])) + "</code></pre>")
            j += 1
        elif m := re.match(r"(#{1,6}) (.*)", line):
            level = len(m.group(1))
            out.append(f"<h{level}>{_md_inline(m.group(2))}</h{level}>")
        elif line.lstrip().startswith("|"):
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            rows = [_md_row(row) for row in lines[i:j]]
            rows = [r for r in rows if not all(re.fullmatch(r":?-+:?", c) for c in r)]
            out.append(_html_table(rows[0], [r + [""] * (len(rows[0]) - len(r)) for r in rows[1:]], markdown=True))
        elif line.startswith(">"):
            while j < len(lines) and lines[j].startswith(">"):
                j += 1
            text = " ".join(row.lstrip("> ").strip() for row in lines[i:j])
            kind = "warn" if text.startswith("**Warning:**") else "note"
            out.append(f"<div class='{kind}'>{_md_inline(text)}</div>")
        elif re.match(r"[-*] ", line):
            while j < len(lines) and re.match(r"[-*] ", lines[j]):
                j += 1
            out.append("<ul>" + "".join(f"<li>{_md_inline(row[2:])}</li>" for row in lines[i:j]) + "</ul>")
        elif line.strip():
            while j < len(lines) and lines[j].strip() and not re.match(r"```|#{1,6} |\s*\||>|[-*] ", lines[j]):
                j += 1
            out.append("<p>" + _md_inline(" ".join(row.strip() for row in lines[i:j])) + "</p>")
        i = j
    return out


def has_wide_table(text: str) -> bool:
    """Whether a Markdown text holds a table of more than :data:`WIDE_COLUMNS` columns: MLflow's
    Markdown preview boxes such a table and cuts its right-hand columns off, so a step that logs it
    also logs its :func:`markdown_html` rendering (:mod:`shipyard.tracking.steprun`)."""
    return any(len(_md_row(line)) > WIDE_COLUMNS for line in text.splitlines() if line.lstrip().startswith("|"))


def markdown_html(text: str, title: str = "") -> str:
    """A Markdown report as one self-contained HTML page in the reports' style (:data:`CSS`: it wraps
    and fits a narrow frame such as MLflow's artifact viewer). Reads the subset shipyard's Markdown
    reports use: headings, paragraphs, pipe tables, bullet lists, quotes (``> **Warning:**`` as a
    warning box), fenced code, `code`, **bold** and _emphasis_. The text goes through :func:`redact`."""
    text = redact(text)
    lines = text.splitlines()
    if not title:
        title = next((line.lstrip("# ").strip() for line in lines if line.startswith("#")), "report")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title><style>"
            + CSS + "</style></head><body>\n" + "\n".join(_md_blocks(lines)) + "\n</body></html>\n")


@dataclass
class Doc:
    """A report as a list of blocks, rendered to Markdown or to one self-contained HTML page."""

    title: str
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str, css: str = "") -> Doc:
        """A heading (level 1 to 3); ``css`` colours it in HTML (pass/fail)."""
        self.blocks.append(("h", (level, redact(text), css)))
        return self

    def p(self, text: str, bold_lead: str = "") -> Doc:
        """A paragraph, optionally led by a bold label ("Decision:")."""
        self.blocks.append(("p", (bold_lead, redact(text))))
        return self

    def warn(self, text: str) -> Doc:
        """A warning box (HTML) / quoted warning (Markdown)."""
        self.blocks.append(("warn", redact(text)))
        return self

    def note(self, text: str) -> Doc:
        """An information box (HTML) / quoted note (Markdown)."""
        self.blocks.append(("note", redact(text)))
        return self

    def items(self, lines: Iterable[str]) -> Doc:
        """A bullet list."""
        self.blocks.append(("ul", [redact(line) for line in lines]))
        return self

    def table(self, head: Sequence[str], rows: Iterable[Sequence[Any]]) -> Doc:
        """A table; cells are turned into text with :func:`cell` unless they are strings already."""
        body = [[redact(c if isinstance(c, str) else cell(c)) for c in row] for row in rows]
        self.blocks.append(("table", (list(head), body)))
        return self

    def config(self, config: Mapping[str, Any] | None, head: Sequence[str] = ("setting", "value")) -> Doc:
        """A config mapping as a two-column table (nested keys dotted, ``None`` as "not set")."""
        return self.table(head, config_rows(redact_obj(config) if config else config))

    def image(self, alt: str, png: bytes | None) -> Doc:
        """An inline PNG (HTML only; Markdown says where to find it)."""
        if png:
            self.blocks.append(("img", (alt, png)))
        return self

    def to_markdown(self) -> str:
        """The report as Markdown (images are left to the HTML report)."""
        out: list[str] = []
        images = 0
        for kind, data in self.blocks:
            if kind == "h":
                out += ["#" * data[0] + " " + data[1], ""]
            elif kind == "p":
                out += [(f"**{data[0]}** " if data[0] else "") + data[1], ""]
            elif kind == "warn":
                out += [f"> **Warning:** {data}", ""]
            elif kind == "note":
                out += [f"> **Note:** {data}", ""]
            elif kind == "ul":
                out += [f"- {line}" for line in data] + [""]
            elif kind == "table":
                head, rows = data
                out.append("| " + " | ".join(_md_cell(h) for h in head) + " |")
                out.append("|" + "---|" * len(head))
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
                if not rows:
                    out.append("| " + " | ".join(["(none)"] + [""] * (len(head) - 1)) + " |")
                out.append("")
            elif kind == "img":
                images += 1
        if images:
            out += [f"_{images} plot(s) in the HTML report._", ""]
        return "\n".join(out).rstrip() + "\n"

    def to_html(self) -> str:
        """The report as one HTML page: inline CSS and PNGs, no script, no external URL."""
        out = ["<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(redact(self.title))
               + "</title><style>" + CSS + "</style></head><body>"]
        for kind, data in self.blocks:
            if kind == "h":
                level, text, css = data
                out.append(f"<h{level}{f' class={css!r}' if css else ''}>{html.escape(text)}</h{level}>")
            elif kind == "p":
                out.append("<p>" + (f"<b>{html.escape(data[0])}</b> " if data[0] else "") + html.escape(data[1]) + "</p>")
            elif kind == "warn":
                out.append(f"<div class='warn'><b>Warning:</b> {html.escape(data)}</div>")
            elif kind == "note":
                out.append(f"<div class='note'><b>Note:</b> {html.escape(data)}</div>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in data) + "</ul>")
            elif kind == "table":
                out.append(_html_table(*data))
            elif kind == "img":
                alt, png = data
                out.append(f"<img alt='{html.escape(alt, quote=True)}' src='{png_data_url(png)}'>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


@dataclass
class Check:
    """One comparison a gate made: the measured value, the reference it was compared with, the
    threshold, the margin (positive: room to spare), the rule that decided, and the verdict."""

    name: str
    measured: float | None
    reference: float | None
    threshold: str
    margin: float | None
    passed: bool
    rule: str = ""
    note: str = ""
    compared: bool = True


CHECK_HEAD = ["check", "measured", "reference", "threshold", "margin", "rule that decided", "result", "note"]


@dataclass
class GateReport:
    """A gate's decision: passed, the one-line reason, the rule, every check and some context."""

    gate: str
    passed: bool
    reason: str
    rule: str = ""
    checks: list[Check] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-able data."""
        return asdict(self)

    def counts(self) -> dict[str, int]:
        """How many checks were compared, passed, failed and not compared (the reason's numbers)."""
        compared = [c for c in self.checks if c.compared]
        return {"compared": len(compared), "passed": sum(c.passed for c in compared),
                "failed": sum(not c.passed for c in compared), "not_compared": len(self.checks) - len(compared)}

    def doc(self) -> Doc:
        """The report as a :class:`Doc`."""
        verdict = "PASS" if self.passed else "FAIL"
        doc = Doc(f"{self.gate}: {verdict}").h(1, f"{self.gate}: {verdict}", "pass" if self.passed else "fail")
        doc.p(self.reason, "Decision:")
        if self.rule:
            doc.p(self.rule, "Rule:")
        if self.context:
            doc.config(self.context)
        if self.checks:
            n = self.counts()
            doc.p(f"{n['compared']} compared: {n['passed']} pass, {n['failed']} fail"
                  + (f"; {n['not_compared']} not compared" if n["not_compared"] else "") + ".", "Checks:")
            doc.table(CHECK_HEAD, [[c.name, fmt(c.measured), fmt(c.reference), c.threshold, fmt(c.margin), c.rule,
                                    ("pass" if c.passed else "FAIL") if c.compared else "not compared", c.note]
                                   for c in self.checks])
        else:
            doc.p("none: " + self.reason, "Checks:")
        return doc

    def to_markdown(self) -> str:
        """The report as Markdown (KFP UI, MLflow)."""
        return self.doc().to_markdown()

    def to_html(self) -> str:
        """The report as a self-contained HTML page."""
        return self.doc().to_html()


def sample_warnings(levels: Iterable[Mapping[str, Any]], who: str) -> list[str]:
    """A warning (one per model) naming every load level whose latency percentiles rest on fewer
    than :data:`MIN_SAMPLES` requests, with the count of each.

    A level is a benchmark level (``successful`` and ``samples``) or a candidate record's level
    (``samples`` as a count, or ``successful``/``total``).
    """
    few = []
    for lv in levels:
        n = sample_count(lv)
        if n is not None and n < MIN_SAMPLES:
            few.append(f"{level_label(lv)}: {n} request{'s' if n != 1 else ''}")
    if not few:
        return []
    return [f"{who}: the TTFT/ITL percentiles rest on fewer than {MIN_SAMPLES} requests at {len(few)} load "
            f"level{'s' if len(few) != 1 else ''} ({'; '.join(few)}). With so few samples the p99 is about the slowest "
            "request and p90 and p99 may coincide: raise max_requests (and max_seconds) for percentiles that mean something."]


def sample_count(level: Mapping[str, Any]) -> int | None:
    """How many successful requests a level's latency percentiles come from (None: unknown)."""
    samples = level.get("samples")
    if isinstance(samples, Mapping) and isinstance(samples.get("ttft_ms"), list):
        return sum(1 for v in samples["ttft_ms"] if v is not None)
    if isinstance(samples, int) and not isinstance(samples, bool):
        return samples
    for key in ("successful", "total"):
        if isinstance(level.get(key), int):
            return int(level[key])
    return None


def level_label(level: Mapping[str, Any]) -> str:
    """A load level for people: "concurrency 4", "2 req/s (constant)", "synchronous"."""
    name = str(level.get("name") or "?")
    kind, _, load = name.partition("@")
    if kind == "concurrent" and load:
        return f"concurrency {load}"
    if kind in ("constant", "poisson") and load:
        return f"{load} req/s ({kind})"
    return name


def change_text(change: dict[str, Any] | None) -> str:
    """A change as text, e.g. "output tok/s x0.59 [0.54, 0.64] at concurrency 2 (9.4 vs 15.9 tok/s base; rests on 8
    requests; slower)": a figure from a level with fewer than ``MIN_SAMPLES`` requests says how many
    it rests on; ``low``/``high``/``words``: the ratio's interval and what it says (``no difference within noise``)."""
    if change is None:
        return "none"
    n = change.get("samples")
    few = f"; rests on {n} requests" if n is not None and n < MIN_SAMPLES else ""
    # the 95% interval of the ratio and its words (shipyard.gates.noise), when the gate computed one
    interval = (f" [{change['low']:.3g}, {change['high']:.3g}]"
                if change.get("low") is not None and change.get("high") is not None else "")
    words = f"; {change['words']}" if interval and change.get("words") else ""
    return (f"{change['figure']} x{change['ratio']:.3g}{interval} at {change['load']} ({change['candidate']:.4g} vs "
            f"{change['base']:.4g} {change['unit']} base{few}{words})")
