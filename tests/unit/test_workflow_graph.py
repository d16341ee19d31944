"""The workflow graph's layout and SVG, without a database: a pure function of steps and edges."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from runledger_django.admin.workflow_graph import (
    COLUMN_GAP,
    LABEL_MAX_CHARS,
    NODE_WIDTH,
    STATUS_FILLS,
    GraphEdge,
    GraphNode,
    depths,
    layout,
    render_svg,
    summary,
)

SVG = "{http://www.w3.org/2000/svg}"


def fulfilment() -> tuple[list[GraphNode], list[GraphEdge]]:
    """charge and reserve, then ship after both, then notify whatever happened."""
    nodes = [
        GraphNode("charge", "SUCCEEDED", href="/admin/runledger/job/1/change/"),
        GraphNode("reserve", "RUNNING", href="/admin/runledger/job/2/change/"),
        GraphNode("ship", "BLOCKED"),
        GraphNode("notify", "BLOCKED"),
    ]
    edges = [
        GraphEdge("charge", "ship"),
        GraphEdge("reserve", "ship"),
        GraphEdge("ship", "notify", "ON_TERMINAL"),
    ]
    return nodes, edges


def parse(nodes: list[GraphNode], edges: list[GraphEdge], title: str = "run") -> ET.Element:
    return ET.fromstring(str(render_svg(nodes, edges, title=title)))  # noqa: S314  (our own SVG)


def node_elements(root: ET.Element) -> list[ET.Element]:
    return [element for element in root.iter() if "wf-node" in (element.get("class") or "").split()]


def edge_elements(root: ET.Element) -> list[ET.Element]:
    return [
        element
        for element in root.iter(f"{SVG}path")
        if "wf-edge" in (element.get("class") or "").split()
    ]


def test_depths__diamond_and_a_long_way_round__longest_path_wins() -> None:
    edges = [
        GraphEdge("a", "b"),
        GraphEdge("b", "c"),
        GraphEdge("c", "d"),
        GraphEdge("a", "d"),
    ]
    assert depths(["a", "b", "c", "d"], edges) == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_depths__a_stored_cycle__goes_to_the_last_column_instead_of_looping() -> None:
    edges = [GraphEdge("root", "x"), GraphEdge("x", "y"), GraphEdge("y", "x")]
    assert depths(["root", "x", "y"], edges) == {"root": 0, "x": 2, "y": 2}


def test_layout__fan_out_fan_in__columns_by_depth_rows_within() -> None:
    keys = ["split", *[f"part-{n}" for n in range(5)], "join"]
    nodes = [GraphNode(key, "BLOCKED") for key in keys]
    edges = [GraphEdge("split", f"part-{n}") for n in range(5)]
    edges += [GraphEdge(f"part-{n}", "join", "ON_TERMINAL") for n in range(5)]

    placed = layout(nodes, edges)

    assert [placed.positions[key].column for key in keys] == [0, 1, 1, 1, 1, 1, 2]
    assert sorted(placed.positions[f"part-{n}"].row for n in range(5)) == [0, 1, 2, 3, 4]
    assert placed.width >= 3 * NODE_WIDTH + 2 * COLUMN_GAP
    cells = {(p.x, p.y) for p in placed.positions.values()}
    assert len(cells) == len(keys)  # no two steps drawn on top of each other


def test_layout__rows_follow_their_prerequisites() -> None:
    """Two chains side by side stay straight: b follows a's row, y follows x's row."""
    nodes = [GraphNode(key, "BLOCKED") for key in ["x", "a", "b", "y"]]
    edges = [GraphEdge("a", "b"), GraphEdge("x", "y")]

    placed = layout(nodes, edges).positions

    assert placed["b"].row == placed["a"].row
    assert placed["y"].row == placed["x"].row


def test_render__parses_with_one_node_per_step_and_one_edge_per_dependency() -> None:
    nodes, edges = fulfilment()

    root = parse(nodes, edges)

    assert root.tag == f"{SVG}svg"
    assert [element.get("data-step") for element in node_elements(root)] == [
        "charge",
        "reserve",
        "ship",
        "notify",
    ]
    assert [(e.get("data-from"), e.get("data-to")) for e in edge_elements(root)] == [
        ("charge", "ship"),
        ("reserve", "ship"),
        ("ship", "notify"),
    ]


def test_render__edges_styled_by_kind() -> None:
    nodes, edges = fulfilment()

    by_pair = {
        (e.get("data-from"), e.get("data-to")): e for e in edge_elements(parse(nodes, edges))
    }

    success, terminal = by_pair[("charge", "ship")], by_pair[("ship", "notify")]
    assert "wf-edge-success" in (success.get("class") or "")
    assert success.get("stroke-dasharray") is None
    assert "wf-edge-terminal" in (terminal.get("class") or "")
    assert terminal.get("stroke-dasharray")


@pytest.mark.parametrize("status", sorted(STATUS_FILLS))
def test_render__each_status_has_its_class_fill_and_word(status: str) -> None:
    root = parse([GraphNode("step", status)], [])

    [node] = node_elements(root)
    assert f"wf-status-{status.lower().replace('_', '-')}" in (node.get("class") or "")
    rect = node.find(f"{SVG}rect")
    assert rect is not None
    assert rect.get("fill") == STATUS_FILLS[status]
    words = [text.text for text in node.iter(f"{SVG}text")]
    assert words[0] == "step"
    assert words[1]  # the status in words: colour is not the only cue


def test_render__statuses_get_distinct_fills() -> None:
    assert len(set(STATUS_FILLS.values())) == len(STATUS_FILLS)


def test_render__steps_with_jobs_are_links_the_others_are_not() -> None:
    nodes, edges = fulfilment()

    elements = {e.get("data-step"): e for e in node_elements(parse(nodes, edges))}

    assert elements["charge"].tag == f"{SVG}a"
    assert elements["charge"].get("href") == "/admin/runledger/job/1/change/"
    assert elements["ship"].tag == f"{SVG}g"
    assert elements["ship"].get("href") is None


def test_render__every_label_is_escaped() -> None:
    hostile = '<script>alert("x")</script>&'
    nodes = [
        GraphNode(hostile, "FAILED", href='/job/"><script>', detail="<b>err</b>"),
        GraphNode("after", "CANCELED"),
    ]
    edges = [GraphEdge(hostile, "after")]

    text = str(render_svg(nodes, edges, title="<i>type</i> run"))
    root = ET.fromstring(text)  # noqa: S314  (our own SVG)

    assert "<script>" not in text
    assert "<b>" not in text and "<i>" not in text
    assert not list(root.iter(f"{SVG}script"))
    node = next(e for e in node_elements(root) if e.get("data-status") == "FAILED")
    assert node.get("data-step") == hostile  # the parsed value is the original text
    assert node.get("href") == '/job/"><script>'
    title = root.find(f"{SVG}title")
    assert title is not None and title.text == "<i>type</i> run"


def test_render__long_keys_are_shortened_in_the_node_and_whole_in_the_tooltip() -> None:
    key = "a-very-long-step-key-that-does-not-fit-in-the-box"

    [node] = node_elements(parse([GraphNode(key, "ENQUEUED")], []))

    label = next(node.iter(f"{SVG}text")).text or ""
    assert len(label) == LABEL_MAX_CHARS and label.endswith("\u2026")
    tooltip = node.find(f"{SVG}title")
    assert tooltip is not None and (tooltip.text or "").startswith(key)


def test_render__accessible_name_and_description() -> None:
    nodes, edges = fulfilment()

    root = parse(nodes, edges, title="Steps of orders.fulfil run 42")

    labelled_by = root.get("aria-labelledby")
    described_by = root.get("aria-describedby")
    by_id = {element.get("id"): element for element in root.iter() if element.get("id")}
    assert labelled_by and described_by
    assert by_id[labelled_by].text == "Steps of orders.fulfil run 42"
    description = by_id[described_by].text or ""
    assert description.startswith("4 steps: 2 blocked, 1 running, 1 succeeded")
    assert "dashed" in description
    assert root.get("role") == "group"
    assert not list(root.iter(f"{SVG}script"))
    assert not [e for e in root.iter() if any(a.startswith("on") for a in e.attrib)]


def test_render__external_gate_says_so() -> None:
    [node] = node_elements(parse([GraphNode("approve", "WAITING_FOR_EXTERNAL", "EXTERNAL")], []))

    words = [text.text for text in node.iter(f"{SVG}text")]
    assert words[1] == "waiting (external)"


def test_render__edges_to_unknown_steps_are_left_out() -> None:
    root = parse([GraphNode("a", "SUCCEEDED")], [GraphEdge("a", "gone")])

    assert edge_elements(root) == []


def test_summary__no_steps() -> None:
    assert summary([]) == "No steps."
    assert render_svg([], [], title="empty")
