"""Server-rendered SVG bar charts for the admin dashboard: series in, markup out.

A pure function, so a chart is testable in Python and the page needs no JavaScript, no inline
script and no external request (nothing for a Content Security Policy to block). Colours come
from CSS classes (``static/runledger_django/dashboard.css``, built on the admin's variables),
so the admin's dark mode applies. Every label and tooltip is escaped: job types and error codes
are user data. Each chart carries an accessible name (``role="img"`` with ``<title>`` and
``<desc>``) and a collapsible data table holding the same numbers as its tooltips.

The markup is well-formed XML as well as HTML, so tests parse it with ``xml.etree``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 960
"""The viewBox width; the SVG scales to its container (``width="100%"``)."""
HEIGHT = 260
PLOT_LEFT = 56
PLOT_RIGHT = 12
PLOT_TOP = 28
PLOT_BOTTOM = 40
X_LABELS = 8
"""About this many time labels along the x axis, whatever the number of buckets."""
NO_DATA = "no data"
"""What a tooltip and a table cell show for a bucket without a value (no sample taken)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """One stacked layer of a chart: a name for the legend, a CSS class for its colour, and
    one value per bucket (None where nothing was measured, unlike 0)."""

    name: str
    css_class: str
    values: Sequence[float | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class BarChart:
    """A chart's content. ``labels`` name the buckets (one per bucket, in order)."""

    chart_id: str
    """An HTML id prefix; letters, digits and hyphens only (not user data)."""
    title: str
    labels: Sequence[str]
    series: Sequence[Series]
    axis_labels: Sequence[str] | None = None
    """Shorter bucket names for the x axis (default: ``labels``)."""
    unit: str = ""
    empty_text: str = "No data in this window."
    format_value: Callable[[float], str] | None = None


def render_bar_chart(chart: BarChart) -> SafeString:
    """A ``<figure>`` with the SVG (one ``<g class="bucket">`` per bucket, the series stacked,
    bar heights proportional to the values) and a data table; or, when no bucket holds a
    non-zero value, an explicit empty state and no bars."""
    if not chart.chart_id.replace("-", "").isalnum():
        raise ValueError("chart_id must be letters, digits and hyphens")
    if chart.axis_labels is not None and len(chart.axis_labels) != len(chart.labels):
        raise ValueError("axis_labels needs one label per bucket")
    for layer in chart.series:
        if len(layer.values) != len(chart.labels):
            raise ValueError(f"series {layer.name!r} needs one value per bucket")
    fmt = chart.format_value or _format_number
    totals = [
        sum(layer.values[index] or 0 for layer in chart.series)
        for index in range(len(chart.labels))
    ]
    peak = max(totals, default=0)
    title_id = f"{chart.chart_id}-title"
    desc_id = f"{chart.chart_id}-desc"
    title = escape(chart.title)
    parts = [
        f'<figure class="runledger-chart" id="{chart.chart_id}">',
        f"<figcaption>{title}</figcaption>",
    ]
    if peak <= 0:
        parts += [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="runledger-chart-svg '
            f'runledger-chart-empty" viewBox="0 0 {WIDTH} 80" width="100%" role="img" '
            f'aria-labelledby="{title_id} {desc_id}">',
            f'<title id="{title_id}">{title}</title>',
            f'<desc id="{desc_id}">{escape(chart.empty_text)}</desc>',
            f'<text class="empty-text" x="{WIDTH // 2}" y="44" text-anchor="middle">'
            f"{escape(chart.empty_text)}</text>",
            "</svg>",
            "</figure>",
        ]
        return mark_safe("".join(parts))  # noqa: S308  (every piece above is escaped)
    scale_top = _nice_ceiling(peak)
    plot_height = HEIGHT - PLOT_TOP - PLOT_BOTTOM
    plot_width = WIDTH - PLOT_LEFT - PLOT_RIGHT
    slot = plot_width / len(chart.labels)
    bar_width = max(slot * 0.8, 0.5)
    unit = f" {chart.unit}" if chart.unit else ""
    summary = f"Highest bucket: {fmt(peak)}{unit}; {len(chart.labels)} buckets."
    parts += [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="runledger-chart-svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-labelledby="{title_id} {desc_id}">',
        f'<title id="{title_id}">{title}</title>',
        f'<desc id="{desc_id}">{escape(summary)}</desc>',
        _axes(scale_top, fmt, unit),
    ]
    for index, label in enumerate(chart.labels):
        x = PLOT_LEFT + index * slot + (slot - bar_width) / 2
        tip = "; ".join(
            f"{layer.name}: {_shown(layer.values[index], fmt)}" for layer in chart.series
        )
        parts.append(f'<g class="bucket" data-index="{index}">')
        parts.append(f"<title>{escape(f'{label}: {tip}')}</title>")
        base = float(HEIGHT - PLOT_BOTTOM)
        for layer in chart.series:
            value = layer.values[index] or 0
            if value <= 0:
                continue
            height = value / scale_top * plot_height
            base -= height
            parts.append(
                f'<rect class="bar {escape(layer.css_class)}" x="{x:.2f}" y="{base:.4f}" '
                f'width="{bar_width:.2f}" height="{height:.4f}" data-value="{value:g}"/>'
            )
        parts.append("</g>")
    parts.append(_x_labels(chart.axis_labels or chart.labels, slot))
    parts.append(_legend(chart.series))
    parts.append("</svg>")
    parts.append(_table(chart, fmt))
    parts.append("</figure>")
    return mark_safe("".join(parts))  # noqa: S308  (every piece above is escaped)


def _axes(scale_top: float, fmt: Callable[[float], str], unit: str) -> str:
    bottom = HEIGHT - PLOT_BOTTOM
    plot_height = HEIGHT - PLOT_TOP - PLOT_BOTTOM
    out = ['<g class="axis">']
    for fraction in (0.0, 0.5, 1.0):
        y = bottom - fraction * plot_height
        out.append(
            f'<line class="grid" x1="{PLOT_LEFT}" x2="{WIDTH - PLOT_RIGHT}" '
            f'y1="{y:.2f}" y2="{y:.2f}"/>'
        )
        out.append(
            f'<text class="tick" x="{PLOT_LEFT - 6}" y="{y + 4:.2f}" text-anchor="end">'
            f"{escape(fmt(scale_top * fraction))}</text>"
        )
    if unit:
        out.append(
            f'<text class="unit" x="{WIDTH - PLOT_RIGHT}" y="15" text-anchor="end">'
            f"{escape(unit.strip())}</text>"
        )
    out.append("</g>")
    return "".join(out)


def _x_labels(labels: Sequence[str], slot: float) -> str:
    every = max(1, math.ceil(len(labels) / X_LABELS))
    out = ['<g class="x-labels">']
    y = HEIGHT - PLOT_BOTTOM + 16
    for index in range(0, len(labels), every):
        x = PLOT_LEFT + index * slot + slot / 2
        out.append(
            f'<text class="tick" x="{x:.2f}" y="{y}" text-anchor="middle">'
            f"{escape(labels[index])}</text>"
        )
    out.append("</g>")
    return "".join(out)


def _legend(series: Sequence[Series]) -> str:
    out = ['<g class="legend">']
    x = float(PLOT_LEFT)
    for layer in series:
        out.append(
            f'<rect class="swatch {escape(layer.css_class)}" x="{x:.1f}" y="6" '
            'width="10" height="10"/>'
        )
        out.append(f'<text class="legend-text" x="{x + 14:.1f}" y="15">{escape(layer.name)}</text>')
        x += 24 + 7 * len(layer.name)
    out.append("</g>")
    return "".join(out)


def _table(chart: BarChart, fmt: Callable[[float], str]) -> str:
    head = "".join(f'<th scope="col">{escape(layer.name)}</th>' for layer in chart.series)
    rows = []
    for index, label in enumerate(chart.labels):
        cells = "".join(
            f"<td>{escape(_shown(layer.values[index], fmt))}</td>" for layer in chart.series
        )
        rows.append(f'<tr><th scope="row">{escape(label)}</th>{cells}</tr>')
    unit = f" ({escape(chart.unit)})" if chart.unit else ""
    return (
        '<details class="runledger-chart-data"><summary>Data table</summary>'
        f'<table id="{chart.chart_id}-data"><caption>{escape(chart.title)}{unit}</caption>'
        f'<thead><tr><th scope="col">Bucket</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></details>"
    )


def _shown(value: float | None, fmt: Callable[[float], str]) -> str:
    return NO_DATA if value is None else fmt(value)


def _format_number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 or 10 times a power of ten that is at least ``value``:
    round axis labels; bars stay proportional to the values whatever the ceiling."""
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10.0**exponent
        if candidate >= value:
            return candidate
    return 10.0 ** (exponent + 1)  # pragma: no cover  (10 x 10^e always qualifies)
