"""The status page's SVG charts, checked as XML: one mark per value, heights to scale."""

import xml.etree.ElementTree as ET

from pylog.warehouse import svg

NS = {"s": "http://www.w3.org/2000/svg"}


def test_bars_are_proportional_and_titled():
    root = ET.fromstring(svg.bar_chart("loaded <per> run", [10, 40, 0, 20], ["a", "b", "c", "d&e"]))
    bars = root.findall("s:rect", NS)
    assert [bar.find("s:title", NS).text for bar in bars] == ["a: 10", "b: 40", "c: 0", "d&e: 20"]
    heights = [float(bar.get("height")) for bar in bars]
    assert heights[1] == svg.HEIGHT - svg._TOP - svg._BOTTOM  # the largest fills the plot
    assert heights[0] * 4 == heights[1] and heights[2] == 0 and heights[3] * 2 == heights[1]
    bottoms = {round(float(b.get("y")) + float(b.get("height")), 1) for b in bars}
    assert bottoms == {svg.HEIGHT - svg._BOTTOM}  # every bar stands on the axis
    xs = [float(b.get("x")) for b in bars]
    assert xs == sorted(xs) and all(float(b.get("width")) <= svg.MAX_BAR_WIDTH for b in bars)
    assert root.get("aria-label") == "loaded <per> run"


def test_line_goes_through_every_value():
    root = ET.fromstring(svg.line_chart("lag", [5, 0, 2_500_000], ["r1", "r2", "now"]))
    points = [tuple(map(float, p.split(","))) for p in root.find("s:polyline", NS).get("points").split()]
    assert len(points) == 3 and points[0][0] < points[1][0] < points[2][0]
    assert points[1][1] == svg.HEIGHT - svg._BOTTOM and points[2][1] == svg._TOP
    assert [c.find("s:title", NS).text for c in root.findall("s:circle", NS)] == ["r1: 5", "r2: 0", "now: 2.5M"]
    assert "2.5M" in [t.text for t in root.findall("s:text", NS)]


def test_nothing_to_draw():
    for chart in (svg.bar_chart("x", [], []), svg.line_chart("x", [0], ["only"])):
        root = ET.fromstring(chart)
        assert root.findall("s:rect", NS) == [] and root.find("s:polyline", NS) is None
