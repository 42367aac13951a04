"""fleet.csv and fleet.html against the PeriodSummaries they were written from.

Oracles: the summaries themselves (the table must read back to exactly them; every chart's polyline,
dots and band must map back, through the axis transform the SVG states, to their values, dates and
standard deviations, to the coordinates' resolution), the flags passed in, and Debian's Chromium, which
must render the page headless.
"""
import csv
import datetime
import html
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from sysid_core.fleet.drift import DriftFlag, drift_flags
from sysid_core.fleet.report import BAND_SIGMAS, write_fleet_report
from sysid_core.fleet.summary import PeriodSummary
from sysid_core.fleet.table import COLUMNS, read_fleet_csv, write_fleet_csv

START = datetime.date(2024, 3, 1)
DAY = datetime.timedelta(days=1)
JOINTS = tuple(f"joint{j}" for j in range(7))
RESOLUTION_PX = 0.005  # coordinates are written to a hundredth of a pixel: half of it is the rounding


def _fleet(robots=3, days=14, joints=JOINTS, seed=0, payload=True):
    """A fleet with every kind of period: good, doubtful (with reasons), one failed with an error (all NaN),
    a NaN standard deviation, a payload on most periods and none on some."""
    rng = np.random.default_rng(seed)
    out = []
    n = len(joints)
    for r in range(robots):
        level = rng.uniform(0.2, 2.0, n)
        for d in range(days):
            date = START + d * DAY
            coulomb = level * (1 + 0.02 * rng.standard_normal(n)) + (0.3 * level if (r == 0 and d >= 9) else 0)
            viscous = 0.1 * level * (1 + 0.02 * rng.standard_normal(n))
            cstd, vstd = 0.02 * level, 0.002 * level
            if r == 1 and d == 5:
                out.append(PeriodSummary(f"arm{r:02d}", date, joints, np.full(n, np.nan), np.full(n, np.nan),
                                         np.full(n, np.nan), np.full(n, np.nan), "failed",
                                         ("the torque fit diverged",), error="recording has 12 samples", params=""))
                continue
            cstd = cstd.copy()
            if d == 3:
                cstd[1] = np.nan
            verdict, reasons = ("doubtful", ("condition number 2.1e3", "joint1 barely moved")) if d == 7 else (
                "good", ())
            has_payload = payload and d % 5 != 4
            out.append(PeriodSummary(
                f"arm{r:02d}", date, joints, coulomb, cstd, viscous, vstd, verdict, reasons,
                mass=0.5 + 0.01 * rng.standard_normal() if has_payload else None,
                mass_std=0.004 if has_payload else None,
                com=np.array([0.01, -0.02, 0.05]) + 1e-4 * rng.standard_normal(3) if has_payload else None,
                com_std_mm=0.8 if has_payload else None, samples=12000 + d, hours=0.25,
                params=f"arm{r:02d}/{date.isoformat()}/params.json"))
    return out


def _same(a: PeriodSummary, b: PeriodSummary) -> bool:
    """Exact equality, NaN equal to NaN, arrays of float64 alike."""
    for field in PeriodSummary.__dataclass_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or np.asarray(x).dtype != np.asarray(y).dtype or np.asarray(x).shape != \
                    np.asarray(y).shape or not np.array_equal(x, y, equal_nan=True):
                return False
            continue
        if isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y):
            continue
        if x != y or type(x) is not type(y):
            return False
    return True


# --------------------------------------------------------------------------- fleet.csv

def test_table_round_trips_exactly(tmp_path):
    """Written and read back: the same summaries, field by field and bit by bit, in robot and date order,
    whatever the text (commas, quotes, new lines, non-ASCII) and the numbers (NaN, inf, -0.0, 1e-300,
    0.1 + 0.2) hold, with a payload or None, with an error, and for a period without joints."""
    periods = _fleet()
    odd = PeriodSummary('arm,"odd"\nname', START, ("j,1", 'j"2', "ĵ3"), np.array([0.1 + 0.2, -0.0, 1e-300]),
                        np.array([np.nan, np.inf, 5e-324]), np.array([-1.5, 1e300, 2.0 / 3.0]),
                        np.array([0.0, np.nan, 1e-17]), "doubtful", ('a, "quoted"\nreason', "[not json"),
                        mass=float("nan"), mass_std=0.0, com=np.array([np.nan, -0.0, 1.0 / 3.0]), com_std_mm=np.inf,
                        samples=0, hours=1.0 / 7.0, params="dir with, comma/params.json", error=None)
    empty = PeriodSummary("broken", START + DAY, (), np.empty(0), np.empty(0), np.empty(0), np.empty(0), "failed",
                          (), error="model file not found: 'arm.xml'")
    written = periods[::-1] + [odd, empty]
    path = write_fleet_csv(tmp_path / "fleet.csv", written)
    back = read_fleet_csv(path)
    expected = sorted(written, key=lambda s: (s.robot, s.date))
    assert len(back) == len(expected)
    for a, b in zip(expected, back):
        assert _same(a, b), (a, b)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == ",".join(COLUMNS)
    # one row per robot, date and joint (the joint-less period one row): 3 x 14 x 7, 3 and 1
    rows = list(csv.reader(open(path, newline="", encoding="utf-8")))[1:]
    assert len(rows) == 3 * 14 * 7 + 3 + 1
    keys = [(r[0], r[1]) for r in rows]
    assert keys == sorted(keys)
    first = [r for r in rows if r[0] == "arm00" and r[1] == "2024-03-01"]
    assert [r[2] for r in first] == list(JOINTS)
    assert len({tuple(r[7:]) for r in first}) == 1  # the period's columns repeat on every joint's row
    odd_row = next(r for r in rows if r[2] == "j,1")
    assert odd_row[3] == "0.30000000000000004" and odd_row[4] == "nan" and odd_row[10] == "0.0"
    nothing = next(r for r in rows if r[0] == "arm00" and r[1] == "2024-03-05")
    assert nothing[9:15] == [""] * 6 and nothing[18] == ""  # no payload, no error: empty cells


def test_table_is_replaced_atomically(tmp_path):
    """Writing over an existing table replaces it whole and leaves no temporary file beside it."""
    path = tmp_path / "fleet.csv"
    write_fleet_csv(path, _fleet(robots=2))
    write_fleet_csv(path, _fleet(robots=1, days=3))
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.csv"]
    assert len(read_fleet_csv(path)) == 3


def test_table_refuses_what_it_did_not_write(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a fleet table"):
        read_fleet_csv(path)
    periods = _fleet(robots=1, days=2)
    with pytest.raises(ValueError, match="two periods on one date"):
        write_fleet_csv(tmp_path / "fleet.csv", periods + periods[:1])


# --------------------------------------------------------------------------- fleet.html

class _Page(HTMLParser):
    """The tags of a page (name, attributes) and its text, as a browser's parser sees them."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _sections(page: str) -> dict:
    """{robot name (unescaped, from its heading): the section's HTML}."""
    out = {}
    for match in re.finditer(r'<section id="robot-\d+"><h2>(.*?)</h2>(.*?)</section>', page, re.S):
        out[html.unescape(match.group(1)).removeprefix("Robot ")] = match.group(2)
    return out


def _charts(section: str) -> dict:
    """{aria-label: the chart's SVG element} of a section (each SVG is well-formed XML)."""
    return {svg.get("aria-label"): svg
            for svg in (ET.fromstring(m.group(0)) for m in re.finditer(r"<svg .*?</svg>", section, re.S))}


def _inverse(svg):
    """(x pixels -> date ordinal, y pixels -> value, value resolution) of a chart, from its stated mapping."""
    a = {k: float(svg.get(f"data-{k}")) for k in ("x0", "x1", "y0", "y1", "px0", "px1", "py0", "py1")}
    to_day = lambda px: a["x0"] + (px - a["px0"]) / (a["px1"] - a["px0"]) * (a["x1"] - a["x0"])
    to_value = lambda py: a["y0"] + (py - a["py0"]) / (a["py1"] - a["py0"]) * (a["y1"] - a["y0"])
    resolution = RESOLUTION_PX * abs((a["y1"] - a["y0"]) / (a["py1"] - a["py0"]))
    return to_day, to_value, resolution


def _points(text: str) -> np.ndarray:
    return np.array([[float(c) for c in pair.split(",")] for pair in text.split()])


def test_report_structure_flags_and_failed_periods(tmp_path):
    """Every robot has a section; every flag is listed in the fleet table and in its robot's section, and
    marked on its chart at its since date; the failed period shows as failed with its error; the summary
    counts match the summaries; the page fetches nothing and runs nothing."""
    periods = _fleet()
    flags = drift_flags(periods)
    assert [(f.joint, f.term) for f in flags["arm00"]] == [(j, "coulomb") for j in JOINTS]  # the rise on day 9
    flags["arm02"] = [DriftFlag("joint3", "viscous", START + 6 * DAY, START + 8 * DAY, 5.5)]  # one more, by hand
    path = write_fleet_report(tmp_path / "fleet.html", periods, flags, title="Test fleet")
    page = path.read_text(encoding="utf-8")
    parsed = _Page(page)
    assert not [t for t, a in parsed.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert not re.search(r"(src|href)=\"(?!#)|url\(", page)
    sections = _sections(page)
    assert sorted(sections) == ["arm00", "arm01", "arm02"]
    fleet = page[page.index('<section id="fleet">'):page.index("</section>")]
    for robot, found in flags.items():
        for f in found:
            row = (f"<tr><td>{robot}</td><td>{f.joint}</td><td>{f.term}</td><td>{f.since.isoformat()}</td>"
                   f"<td>{f.detected.isoformat()}</td>")
            assert row in fleet, row
            assert f"{f.joint}: {f.term} friction rising since {f.since.isoformat()}" in sections[robot]
            svg = _charts(sections[robot])[f"{f.joint}: {'Coulomb' if f.term == 'coulomb' else 'viscous'} "
                                           f"friction [{'N m' if f.term == 'coulomb' else 'N m s/rad'}]"]
            to_day, _, _ = _inverse(svg)
            since = [line for line in svg.iter("line") if line.get("class") == "since"]
            assert [line.get("data-date") for line in since] == [f.since.isoformat()]
            assert round(to_day(float(since[0].get("x1")))) == f.since.toordinal()
    # the summary row of arm01: 14 periods, 12 good, 1 doubtful, 1 failed
    assert "<tr><td>arm01</td><td>none</td><td class=\"n\">14</td><td class=\"n\">12</td><td class=\"n\">1</td>" \
           "<td class=\"n\">1</td></tr>" in fleet
    failed_row = re.search(r'<tr class="poor"><td>2024-03-06</td><td class="level-failed">failed</td>'
                           r"<td>the torque fit diverged</td><td>recording has 12 samples</td>", sections["arm01"])
    assert failed_row
    crosses = [p for svg in _charts(sections["arm01"]).values() for p in svg.iter("path")
               if p.get("class") == "failed"]
    assert len(crosses) == 2 * len(JOINTS) + 2 and {p.get("data-date") for p in crosses} == {"2024-03-06"}
    assert "doubtful" in sections["arm00"] and "condition number 2.1e3; joint1 barely moved" in sections["arm00"]


def test_chart_lines_and_bands_map_back_to_the_values(tmp_path):
    """Inverting each chart's stated axis mapping, its polylines' and dots' points are the identified
    values on their dates and its band polygons the values +- 2 standard deviations, to the coordinates'
    resolution; a period without a value (failed) splits the line, one without a standard deviation the
    band; the payload charts hold the mass and the centre of mass's distance (mm) with their bands."""
    periods = _fleet()
    path = write_fleet_report(tmp_path / "fleet.html", periods, drift_flags(periods))
    sections = _sections(path.read_text(encoding="utf-8"))
    checked = 0
    for robot, section in sections.items():
        charts = _charts(section)
        mine = [p for p in periods if p.robot == robot and p.verdict != "failed"]
        series = {}
        for j, joint in enumerate(JOINTS):
            for term, label, unit in (("coulomb", "Coulomb", "N m"), ("viscous", "viscous", "N m s/rad")):
                series[f"{joint}: {label} friction [{unit}]"] = [
                    (p.date.toordinal(), getattr(p, term)[j], getattr(p, term + "_std")[j]) for p in mine]
        with_payload = [p for p in mine if p.mass is not None]
        series["payload mass [kg]"] = [(p.date.toordinal(), p.mass, p.mass_std) for p in with_payload]
        series["payload centre of mass, distance from the origin [mm]"] = [
            (p.date.toordinal(), 1000 * np.linalg.norm(p.com), p.com_std_mm) for p in with_payload]
        assert set(series) == set(charts)
        for label, truth in series.items():
            svg = charts[label]
            to_day, to_value, resolution = _inverse(svg)
            tolerance = resolution + 1e-9 * max(abs(v) for _, v, _ in truth)
            lines = [_points(p.get("points")) for p in svg.iter("polyline")]
            drawn = np.concatenate(lines)
            days = np.array([d for d, _, _ in truth], dtype=float)
            values = np.array([v for _, v, _ in truth])
            assert np.array_equal(np.round(to_day(drawn[:, 0])), days), label
            assert np.max(np.abs(to_value(drawn[:, 1]) - values)) <= tolerance, label
            dots = np.array([[float(c.get("cx")), float(c.get("cy"))] for c in svg.iter("circle")])
            assert np.max(np.abs(to_value(dots[:, 1]) - values)) <= tolerance, label
            # a line per stretch of consecutive periods with a value: a failed period, or one without a
            # payload, cuts the line
            present = [p.date.toordinal() in set(days) for p in periods if p.robot == robot]
            assert len(lines) == sum(1 for i, x in enumerate(present) if x and (i == 0 or not present[i - 1])), label
            bands = [_points(p.get("points")) for p in svg.iter("polygon") if p.get("class") == "band"]
            band_days, upper, lower = [], [], []
            for band in bands:
                half = len(band) // 2
                band_days += list(np.round(to_day(band[:half, 0])))
                upper += list(to_value(band[:half, 1]))
                lower += list(to_value(band[half:, 1])[::-1])
            stds = {d: s for d, _, s in truth}
            level = {d: v for d, v, _ in truth}
            assert sorted(band_days) == sorted(d for d, _, s in truth if np.isfinite(s)), label
            for d, hi, lo in zip(band_days, upper, lower):
                assert abs(hi - (level[d] + BAND_SIGMAS * stds[d])) <= tolerance, label
                assert abs(lo - (level[d] - BAND_SIGMAS * stds[d])) <= tolerance, label
            checked += 1
    assert checked == 3 * (2 * len(JOINTS) + 2)


def test_hostile_names_are_escaped(tmp_path):
    """Robot, joint, reason, error and params texts holding markup reach the page as text only: no tag
    they spell is parsed as a tag, and each reads back, unescaped, as written."""
    evil = '<script>alert("r")</script>&amp;\'"'
    joint = '<img src=x onerror=alert(1)>'
    reason = '</td></tr></table><iframe src="https://example.invalid/"></iframe>'
    error = "<!-- never closed"
    periods = [PeriodSummary(evil, START + d * DAY, (joint, "ok"), np.array([1.0 + 0.5 * (d >= 6), 1.0]),
                             np.array([0.02, 0.02]), np.array([0.1, 0.1]), np.array([0.002, 0.002]),
                             "failed" if d == 3 else "doubtful", (reason,), error=error if d == 3 else None,
                             params=f"{evil}/p.json") for d in range(10)]
    flags = drift_flags(periods)
    assert [f.joint for f in flags[evil]] == [joint]
    path = write_fleet_report(tmp_path / "fleet.html", periods, flags, title=f"fleet {evil}")
    page = path.read_text(encoding="utf-8")
    parsed = _Page(page)
    assert [t for t, _ in parsed.tags if t in ("script", "img", "iframe")] == []
    text = "".join(parsed.text)
    for raw in (evil, joint, reason, error):
        assert raw not in page
        assert raw in text
    assert list(_sections(page)) == [evil]


def test_report_size_grows_gently(tmp_path):
    """12 robots x 14 dates x 7 joints with a payload: well under 2 MB."""
    periods = _fleet(robots=12, days=14)
    path = write_fleet_report(tmp_path / "fleet.html", periods, drift_flags(periods))
    size = path.stat().st_size
    assert size < 2_000_000 / 2, size
    small = write_fleet_report(tmp_path / "small.html", _fleet(robots=1, days=14), {}).stat().st_size
    assert size < 13 * small  # no more than linear in the robots (plus the fleet tables)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed")
def test_chromium_renders_the_page(tmp_path):
    """Debian's Chromium renders the page headless to a PNG of the window's size without an error."""
    periods = _fleet(robots=2)
    page = write_fleet_report(tmp_path / "fleet.html", periods, drift_flags(periods))
    png = tmp_path / "fleet.png"
    done = subprocess.run(["chromium", "--headless", "--disable-gpu", "--no-sandbox", f"--screenshot={png}",
                           "--window-size=1200,2000", f"--user-data-dir={tmp_path / 'profile'}",
                           page.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 2000)
