"""The dashboard's SVG charts as a pure function (checklist items 45-47): the markup parses as
XML, holds one bar group per bucket with heights proportional to the values, says so when it
is empty, escapes every label, and carries an accessible name and a data table whose numbers
are the tooltips' numbers."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from runledger_django.admin.charts import NO_DATA, BarChart, Series, render_bar_chart

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert('x')</script>&\"evil\""


def xml(markup: str) -> ET.Element:
    """Our own markup, not untrusted input: the stdlib parser is the point of the test."""
    return ET.fromstring(markup)  # noqa: S314


def parse(chart: BarChart) -> ET.Element:
    return xml(str(render_bar_chart(chart)))


def svg_of(figure: ET.Element) -> ET.Element:
    svg = figure.find(f"{SVG}svg")
    assert svg is not None
    return svg


def buckets(figure: ET.Element) -> list[ET.Element]:
    return [g for g in svg_of(figure).iter(f"{SVG}g") if g.get("class") == "bucket"]


def throughput(values: list[list[float | None]], labels: list[str] | None = None) -> BarChart:
    names = ["succeeded", "retried", "dead-lettered"]
    count = len(values[0])
    return BarChart(
        chart_id="chart-1",
        title="Attempts finished",
        labels=labels or [f"10:{minute:02d}" for minute in range(count)],
        series=[
            Series(name=name, css_class=name, values=layer)
            for name, layer in zip(names, values, strict=False)
        ],
        unit="attempts per minute",
    )


def test_render_bar_chart__values__one_bar_group_per_bucket() -> None:
    figure = parse(throughput([[1, 0, 3, 0, 5], [0, 0, 1, 0, 0], [0, 0, 0, 0, 2]]))

    groups = buckets(figure)
    assert [g.get("data-index") for g in groups] == ["0", "1", "2", "3", "4"]
    bars_per_group = [len(g.findall(f"{SVG}rect")) for g in groups]
    assert bars_per_group == [1, 0, 2, 0, 2]  # a zero value draws no bar


def test_render_bar_chart__heights__proportional_to_values() -> None:
    figure = parse(throughput([[2, 4, 8, 1, 7]]))

    heights = [float(g.find(f"{SVG}rect").get("height", "")) for g in buckets(figure)]  # type: ignore[union-attr]
    values = [2, 4, 8, 1, 7]
    per_unit = heights[0] / values[0]
    assert per_unit > 0
    for height, value in zip(heights, values, strict=True):
        assert height == pytest.approx(value * per_unit, rel=1e-6)


def test_render_bar_chart__stacked__each_layer_proportional_and_stacked_upwards() -> None:
    figure = parse(throughput([[6, 3], [2, 0], [4, 1]]))

    first, second = buckets(figure)
    rects = first.findall(f"{SVG}rect")
    heights = [float(rect.get("height", "0")) for rect in rects]
    assert heights[0] / heights[1] == pytest.approx(3.0)
    assert heights[0] / heights[2] == pytest.approx(1.5)
    tops = [float(rect.get("y", "0")) for rect in rects]
    assert tops[0] > tops[1] > tops[2]  # succeeded at the bottom, dead-lettered on top
    for lower, upper in itertools.pairwise(rects):
        assert float(upper.get("y", "0")) + float(upper.get("height", "0")) == pytest.approx(
            float(lower.get("y", "0"))
        )
    second_total = sum(float(rect.get("height", "0")) for rect in second.findall(f"{SVG}rect"))
    assert sum(heights) / second_total == pytest.approx(12 / 4)


@pytest.mark.parametrize(
    "values", [[[0, 0, 0]], [[None, None, None]], [[0, None, 0]]], ids=["zeros", "none", "mixed"]
)
def test_render_bar_chart__nothing_to_draw__explicit_empty_state(
    values: list[list[float | None]],
) -> None:
    chart = BarChart(
        chart_id="empty-chart",
        title="Queue depth",
        labels=["a", "b", "c"],
        series=[Series(name="due", css_class="due", values=values[0])],
        empty_text="No queue samples in this window.",
    )
    figure = parse(chart)

    svg = svg_of(figure)
    assert "runledger-chart-empty" in (svg.get("class") or "")
    assert buckets(figure) == []
    assert list(svg.iter(f"{SVG}rect")) == []
    texts = ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]
    assert texts == ["No queue samples in this window."]
    assert svg.get("role") == "img"
    assert figure.find("details") is None  # no table of nothing


def test_render_bar_chart__markup_in_labels__escaped_everywhere() -> None:
    """A job type with markup (user data) never becomes markup: not in the title, the legend,
    the tooltips, the axis or the table (cf. Sidekiq's CVE-2024-32887)."""
    chart = BarChart(
        chart_id="chart-x",
        title=f"Throughput ({HOSTILE})",
        labels=[HOSTILE, "b"],
        series=[Series(name=HOSTILE, css_class="succeeded", values=[1, 2])],
        unit=HOSTILE,
        empty_text=HOSTILE,
    )
    markup = str(render_bar_chart(chart))

    assert "<script" not in markup
    figure = xml(markup)
    svg = svg_of(figure)
    assert "".join(figure.find("figcaption").itertext()) == f"Throughput ({HOSTILE})"  # type: ignore[union-attr]
    assert svg.find(f"{SVG}title").text == f"Throughput ({HOSTILE})"  # type: ignore[union-attr]
    tooltip = buckets(figure)[0].find(f"{SVG}title")
    assert tooltip is not None and tooltip.text == f"{HOSTILE}: {HOSTILE}: 1"
    legend = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "legend-text"]
    assert legend == [HOSTILE]
    headers = [th.text for th in figure.iter("th")]
    assert HOSTILE in headers
    assert figure.find(".//caption").text == f"Throughput ({HOSTILE}) ({HOSTILE})"  # type: ignore[union-attr]
    # Every element is one the chart writes: nothing was smuggled in.
    tags = {element.tag.removeprefix(SVG) for element in figure.iter()}
    allowed = {"figure", "figcaption", "svg", "title", "desc", "g", "line", "text", "rect"}
    assert tags <= allowed | {
        "details",
        "summary",
        "table",
        "caption",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
    }


def test_render_bar_chart__empty_state_text__escaped() -> None:
    chart = BarChart(
        chart_id="chart-e",
        title=HOSTILE,
        labels=["a"],
        series=[Series(name="due", css_class="due", values=[None])],
        empty_text=HOSTILE,
    )
    markup = str(render_bar_chart(chart))
    assert "<script" not in markup
    svg = svg_of(xml(markup))
    assert svg.find(f"{SVG}desc").text == HOSTILE  # type: ignore[union-attr]


def test_render_bar_chart__accessible_name__title_and_desc_referenced() -> None:
    figure = parse(throughput([[1, 2, 3]]))

    svg = svg_of(figure)
    assert svg.get("role") == "img"
    ids = (svg.get("aria-labelledby") or "").split()
    assert ids == ["chart-1-title", "chart-1-desc"]
    title, desc = (svg.find(f"{SVG}*[@id='{ident}']") for ident in ids)
    assert title is not None and title.tag == f"{SVG}title" and title.text == "Attempts finished"
    assert desc is not None and desc.text == "Highest bucket: 3 attempts per minute; 3 buckets."


def test_render_bar_chart__data_table__same_numbers_as_the_tooltips() -> None:
    values: list[list[float | None]] = [[1200, 0, 7], [3, None, 0], [0, 1, 2]]
    figure = parse(throughput(values, labels=["10:00", "10:01", "10:02"]))

    table = figure.find("details/table")
    assert table is not None and table.get("id") == "chart-1-data"
    header = [th.text for th in table.findall("thead/tr/th")]
    assert header == ["Bucket", "succeeded", "retried", "dead-lettered"]
    rows = [
        [row.find("th").text, *(td.text for td in row.findall("td"))]  # type: ignore[union-attr]
        for row in table.findall("tbody/tr")
    ]
    assert rows == [
        ["10:00", "1,200", "3", "0"],
        ["10:01", "0", NO_DATA, "1"],
        ["10:02", "7", "0", "2"],
    ]
    tooltips = [g.find(f"{SVG}title").text for g in buckets(figure)]  # type: ignore[union-attr]
    assert tooltips == [
        f"{row[0]}: succeeded: {row[1]}; retried: {row[2]}; dead-lettered: {row[3]}" for row in rows
    ]
    bar_values = [
        [rect.get("data-value") for rect in g.findall(f"{SVG}rect")] for g in buckets(figure)
    ]
    assert bar_values == [["1200", "3"], ["1"], ["7", "2"]]


def test_render_bar_chart__mismatched_lengths__refused() -> None:
    with pytest.raises(ValueError, match="one value per bucket"):
        render_bar_chart(
            BarChart(
                chart_id="c",
                title="t",
                labels=["a", "b"],
                series=[Series(name="s", css_class="s", values=[1])],
            )
        )
    with pytest.raises(ValueError, match="chart_id"):
        render_bar_chart(BarChart(chart_id="a b", title="t", labels=["a"], series=[]))
