"""A workflow run's graph as server-rendered SVG: a pure layout and a pure render, no database.

The layout is layered by dependency depth (a step's column is the longest path from a root to
it), so every edge points rightwards and a fan-out/fan-in reads as columns. Within a column the
steps are ordered by the mean row of their prerequisites (one barycentre pass), which keeps
chains straight and a chord's header beside its body, then by key so the drawing is stable.

The drawing needs no JavaScript: each step is a link to its job's admin page (when it has a
job), with its facts in a ``<title>`` tooltip; the status is a class (the admin template maps it
to the admin's colour variables, so dark mode stays readable), a fallback ``fill`` and a word
inside the node, so colour is never the only cue. Every label is escaped. The SVG is a labelled group (its
links stay reachable by keyboard) with an accessible name and description; the page shows a table with the same facts beside it.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

NODE_WIDTH = 168
NODE_HEIGHT = 44
COLUMN_GAP = 64
ROW_GAP = 16
MARGIN = 12
LABEL_MAX_CHARS = 22
"""Longer step keys are shortened in the node; the tooltip and the table show them whole."""

STATUS_FILLS: dict[str, str] = {
    "BLOCKED": "#f0f0f0",
    "ENQUEUED": "#ffffff",
    "RUNNING": "#fff4c2",
    "WAITING_FOR_EXTERNAL": "#e0ecff",
    "SUCCEEDED": "#ddf5dd",
    "FAILED": "#ffe0e0",
    "CANCELED": "#e6e6e6",
}
"""Fallback fills (light mode) for a page without the admin's CSS; the template's classes win."""

STATUS_WORDS: dict[str, str] = {
    "BLOCKED": "blocked",
    "ENQUEUED": "queued",
    "RUNNING": "running",
    "WAITING_FOR_EXTERNAL": "waiting",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "CANCELED": "canceled",
}

EDGE_KINDS = {"ON_SUCCESS": "success", "ON_TERMINAL": "terminal"}


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One step as drawn: ``status`` is the step's status, or RUNNING for an ENQUEUED step
    whose job is leased (the step row does not record the claim)."""

    key: str
    status: str
    kind: str = "JOB"
    href: str | None = None
    detail: str = ""
    """Extra facts for the tooltip (job type, attempts, error code)."""


@dataclass(frozen=True, slots=True)
class GraphEdge:
    prerequisite: str
    dependent: str
    release_mode: str = "ON_SUCCESS"


@dataclass(frozen=True, slots=True)
class Placement:
    column: int
    row: int
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Layout:
    positions: dict[str, Placement]
    width: int
    height: int


def depths(keys: Sequence[str], edges: Iterable[GraphEdge]) -> dict[str, int]:
    """Each step's longest distance from a root (Kahn's order; edges to unknown keys are
    ignored). A cycle cannot be stored (the start checks the graph), but should one appear,
    the steps left on it are put in the last column rather than looping."""
    known = set(keys)
    dependents: dict[str, list[str]] = defaultdict(list)
    indegree = dict.fromkeys(keys, 0)
    for edge in edges:
        if edge.prerequisite in known and edge.dependent in known:
            dependents[edge.prerequisite].append(edge.dependent)
            indegree[edge.dependent] += 1
    depth = dict.fromkeys(keys, 0)
    ready = deque(key for key in keys if indegree[key] == 0)
    seen = 0
    while ready:
        key = ready.popleft()
        seen += 1
        for dependent in dependents[key]:
            depth[dependent] = max(depth[dependent], depth[key] + 1)
            indegree[dependent] -= 1
            if indegree[dependent] == 0:
                ready.append(dependent)
    if seen < len(keys):
        last = max(depth.values(), default=0) + 1
        for key, remaining in indegree.items():
            if remaining:
                depth[key] = last
    return depth


def layout(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge]) -> Layout:
    """Columns by depth; rows by the prerequisites' mean row, then by key."""
    keys = [node.key for node in nodes]
    depth = depths(keys, edges)
    prerequisites: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.prerequisite in depth and edge.dependent in depth:
            prerequisites[edge.dependent].append(edge.prerequisite)
    columns: dict[int, list[str]] = defaultdict(list)
    for key in keys:
        columns[depth[key]].append(key)
    row_of: dict[str, int] = {}
    for column in sorted(columns):
        members = columns[column]

        def order(key: str) -> tuple[float, str]:
            rows = [row_of[p] for p in prerequisites[key] if p in row_of]
            return (sum(rows) / len(rows) if rows else -1.0, key)

        for row, key in enumerate(sorted(members, key=order)):
            row_of[key] = row
    positions = {
        key: Placement(
            column=depth[key],
            row=row_of[key],
            x=MARGIN + depth[key] * (NODE_WIDTH + COLUMN_GAP),
            y=MARGIN + row_of[key] * (NODE_HEIGHT + ROW_GAP),
        )
        for key in keys
    }
    column_count = max(columns, default=-1) + 1
    tallest = max((len(members) for members in columns.values()), default=0)
    width = 2 * MARGIN + max(column_count * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP, 0)
    height = 2 * MARGIN + max(tallest * (NODE_HEIGHT + ROW_GAP) - ROW_GAP, 0)
    return Layout(positions=positions, width=width, height=height)


def _short(text: str) -> str:
    return text if len(text) <= LABEL_MAX_CHARS else text[: LABEL_MAX_CHARS - 1] + "\u2026"


def _status_class(status: str) -> str:
    return status.lower().replace("_", "-") if status in STATUS_FILLS else "unknown"


def summary(nodes: Sequence[GraphNode]) -> str:
    """The description an assistive technology reads: the steps per status."""
    counts: dict[str, int] = defaultdict(int)
    for node in nodes:
        counts[node.status] += 1
    parts = [
        f"{counts[status]} {STATUS_WORDS[status]}" for status in STATUS_FILLS if counts[status]
    ]
    parts += [f"{count} {status}" for status, count in counts.items() if status not in STATUS_FILLS]
    noun = "step" if len(nodes) == 1 else "steps"
    return f"{len(nodes)} {noun}: " + ", ".join(parts) if parts else "No steps."


def render_svg(
    nodes: Sequence[GraphNode], edges: Sequence[GraphEdge], *, title: str, svg_id: str = "wf"
) -> SafeString:
    """The graph as one ``<svg>`` element (well-formed XML, so it also parses as a file)."""
    placed = layout(nodes, edges)
    title_id, desc_id = f"{svg_id}-title", f"{svg_id}-desc"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="runledger-workflow-graph" '
        f'id="{escape(svg_id)}" role="group" aria-labelledby="{escape(title_id)}" '
        f'aria-describedby="{escape(desc_id)}" width="{placed.width}" height="{placed.height}" '
        f'viewBox="0 0 {placed.width} {placed.height}">',
        f'<title id="{escape(title_id)}">{escape(title)}</title>',
        f'<desc id="{escape(desc_id)}">{escape(summary(nodes))} Solid arrows run the next step '
        "only after a success; dashed arrows run it whatever happened.</desc>",
        "<defs>"
        f'<marker id="{escape(svg_id)}-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
        '<path class="wf-arrow" d="M 0 0 L 10 5 L 0 10 z" fill="#666"/></marker>'
        "</defs>",
        '<g class="wf-edges">',
    ]
    for edge in edges:
        start = placed.positions.get(edge.prerequisite)
        end = placed.positions.get(edge.dependent)
        if start is None or end is None:
            continue
        kind = EDGE_KINDS.get(edge.release_mode, "success")
        x1, y1 = start.x + NODE_WIDTH, start.y + NODE_HEIGHT // 2
        x2, y2 = end.x, end.y + NODE_HEIGHT // 2
        bend = (x2 - x1) // 2
        dash = ' stroke-dasharray="6 4"' if kind == "terminal" else ""
        parts.append(
            f'<path class="wf-edge wf-edge-{kind}" data-from="{escape(edge.prerequisite)}" '
            f'data-to="{escape(edge.dependent)}" '
            f'd="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}" '
            f'fill="none" stroke="#666" stroke-width="1.5"{dash} '
            f'marker-end="url(#{escape(svg_id)}-arrow)"/>'
        )
    parts.append('</g><g class="wf-nodes">')
    for node in nodes:
        at = placed.positions[node.key]
        status_class = _status_class(node.status)
        word = STATUS_WORDS.get(node.status, node.status.lower())
        kind_word = " (external)" if node.kind == "EXTERNAL" else ""
        tooltip = f"{node.key}{kind_word}: {word}" + (f". {node.detail}" if node.detail else "")
        fill = STATUS_FILLS.get(node.status, "#ffffff")
        dash = ' stroke-dasharray="4 3"' if node.status == "BLOCKED" else ""
        body = (
            f"<title>{escape(tooltip)}</title>"
            f'<rect class="wf-box" x="{at.x}" y="{at.y}" width="{NODE_WIDTH}" '
            f'height="{NODE_HEIGHT}" rx="6" fill="{fill}" stroke="#888" stroke-width="1"{dash}/>'
            f'<text class="wf-key" x="{at.x + 10}" y="{at.y + 18}" font-size="13">'
            f"{escape(_short(node.key))}</text>"
            f'<text class="wf-status" x="{at.x + 10}" y="{at.y + 35}" font-size="11">'
            f"{escape(word + kind_word)}</text>"
        )
        attributes = (
            f'class="wf-node wf-status-{status_class}" data-step="{escape(node.key)}" '
            f'data-status="{escape(node.status)}"'
        )
        if node.href:
            parts.append(
                f'<a {attributes} href="{escape(node.href)}" '
                f'aria-label="{escape(tooltip)}">{body}</a>'
            )
        else:
            parts.append(f"<g {attributes}>{body}</g>")
    parts.append("</g></svg>")
    return mark_safe("".join(parts))  # noqa: S308  (every interpolated text is escaped above)
