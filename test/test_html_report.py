"""report.html: one self-contained page per run, the verdict first, small for long runs, rendered
by a real browser, written by sysid-identify (the identifier node's test is in
test_identifier_node.py)."""
import json
import shutil
import subprocess
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import MODELS, ROBOTS
from sysid_core import load_robot
from sysid_core.cli import OUTPUTS, _excitation_rows, main
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.identification.live_recording import gravity_torque
from sysid_core.identification.recording import QualityNote, Recording
from sysid_core.results.export import params_document
from sysid_core.results.html_report import MAX_POINTS, _decimate, write_html_report
from sysid_core.simulation import ideal_recording

pytest.importorskip("matplotlib")

NOMINAL = ROBOTS / "openarm_class.xml"
TRUTH = ROBOTS / "openarm_class_payload.xml"
MAX_BYTES = 5_000_000


class Page(HTMLParser):
    """What a page is made of: section ids in order, every src and href, the text of each section,
    and the class of the verdict section."""

    def __init__(self, text: str):
        super().__init__()
        self.sections, self.sources, self.links, self.classes = [], [], [], {}
        self.text, self._open = {}, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs.get("id"))
            self.classes[attrs.get("id")] = attrs.get("class", "")
            self._open.append(attrs.get("id"))
            self.text[attrs.get("id")] = ""
        for key, into in (("src", self.sources), ("href", self.links)):
            if key in attrs:
                into.append(attrs[key])

    def handle_endtag(self, tag):
        if tag == "section":
            self._open.pop()

    def handle_data(self, data):
        if self._open:
            self.text[self._open[-1]] += data


def _noisy(recording, seed=0):
    """``recording`` as sensors give it: noise on q, dq and torque, no exact accelerations."""
    rng = np.random.default_rng(seed)
    shape = recording.q.shape
    return Recording(recording.time, recording.q + 1e-4 * rng.standard_normal(shape),
                     recording.dq + 1e-3 * rng.standard_normal(shape), recording.tau + 0.02 * rng.standard_normal(shape),
                     recording.joint_names, quality_notes=recording.quality_notes)


@pytest.fixture(scope="module")
def identified():
    """The 7-joint arm with its payload, 6 s at 250 Hz, validated on another multisine; with the truth."""
    nominal, truth = load_robot(NOMINAL), load_robot(TRUTH)
    record = (lambda plan: _noisy(ideal_recording(truth.model, plan, truth.joint_names)))
    recording = record(multisine(nominal.joint_range, 6.0, 250.0, seed=2, max_velocity=1.0))
    validation = record(multisine(nominal.joint_range, 3.0, 250.0, seed=20, max_velocity=1.0))
    result = identify(nominal, recording, IdentificationConfig(), validation=validation)
    document = params_document(result, nominal, "test", truth=truth)
    return nominal, result, document, recording, validation


@pytest.fixture(scope="module")
def failed(identified, tmp_path_factory):
    """The report of an arm that never moved (it holds its pose, the sensors see noise): failed."""
    nominal, _, _, recording, _ = identified
    rng = np.random.default_rng(3)
    n, dof = recording.n_samples, nominal.n_joints
    q = np.tile(recording.q[0], (n, 1)) + 1e-4 * rng.standard_normal((n, dof))
    held = Recording(recording.time, q, 1e-3 * rng.standard_normal((n, dof)),
                     gravity_torque(nominal, q) + 0.01 * rng.standard_normal((n, dof)), recording.joint_names,
                     quality_notes=(QualityNote("doubtful", "joint3 lagged the plan by 0.31 rad at t=4.2 s"),))
    result = identify(nominal, held, IdentificationConfig())
    assert result.verdict.level == "failed"
    document = params_document(result, nominal, "held pose")
    path = write_html_report(tmp_path_factory.mktemp("failed") / "report.html", nominal, result, document, held)
    return path, result


def test_the_report_is_one_file_with_the_verdict_first(identified, tmp_path):
    nominal, result, document, recording, validation = identified
    path = write_html_report(tmp_path / "report.html", nominal, result, document, recording, validation,
                             notes=("4001 samples recorded of 4001 received",))
    text = path.read_text(encoding="utf-8")
    page = Page(text)
    # self-contained: nothing fetched, every image inline, links only within the page
    assert "http://" not in text and "https://" not in text
    assert page.sources and all(src.startswith("data:image/png;base64,") for src in page.sources)
    assert all(link.startswith("#") for link in page.links)
    assert "<script" not in text and "<link" not in text
    # the verdict before anything else, then the sections in their reading order
    assert page.sections == ["verdict", "payload", "friction", "torque", "validation", "base", "excitation",
                             "quality"]
    assert text.index('id="verdict"') < text.index("<table")
    assert "good" in page.classes["verdict"].split() and "Verdict: GOOD" in page.text["verdict"]
    # the payload against the model and the truth
    payload = page.text["payload"]
    assert f"{document['mass']:.6g}" in payload and f"{document['truth']['mass']:.6g}" in payload
    assert f"{nominal.nominal_parameters[nominal.body_names.index('link7')][0]:.6g}" in payload
    # every joint's friction, every base parameter with its expression and relative std
    for joint in document["joints"]:
        assert joint["name"] in page.text["friction"] and f"{joint['coulomb_friction']:.4g}" in page.text["friction"]
        assert f"{document['validation_rmse_per_joint'][joint['name']]:.4g}" in page.text["validation"]
    for parameter in document["base_parameters"]:
        assert parameter["expression"] in page.text["base"]
        assert f"{parameter['relative_std_percent']:.3g}" in page.text["base"]
    assert "4001 samples recorded" in page.text["quality"]
    # friction curves, torque fit, residuals, base parameters, joint paths
    assert len(page.sources) == 5


def test_a_failed_verdict_shows_as_failed(failed):
    path, result = failed
    text = path.read_text(encoding="utf-8")
    page = Page(text)
    assert page.sections[0] == "verdict" and "failed" in page.classes["verdict"].split()
    assert "Verdict: FAILED" in page.text["verdict"] and "Do not use the numbers" in page.text["verdict"]
    for reason in result.verdict.reasons:
        assert reason in page.text["verdict"]
    # the source's note on the recording, with its level
    assert "joint3 lagged the plan" in page.text["quality"] and "doubtful" in page.text["quality"]


def test_tables_only_without_figures(identified, tmp_path):
    nominal, result, document, recording, validation = identified
    page = Page(write_html_report(tmp_path / "r.html", nominal, result, document, recording, validation,
                                  figures=False).read_text())
    assert not page.sources and "figures not drawn" in page.text["friction"]
    assert page.sections[:2] == ["verdict", "payload"]


def test_decimation_keeps_the_extremes_in_time_order():
    rng = np.random.default_rng(0)
    time = np.arange(600_001) / 1000.0
    values = np.cumsum(rng.standard_normal(time.size))
    t, v = _decimate(time, values)
    assert t.size <= MAX_POINTS and np.all(np.diff(t) >= 0)
    assert v.max() == values.max() and v.min() == values.min()
    np.testing.assert_array_equal(v, values[np.searchsorted(time, t)])
    short = np.arange(100.0)
    assert _decimate(short, short)[0] is short  # what fits is kept whole


def test_a_ten_minute_recording_makes_a_small_report(identified, tmp_path):
    """10 min at 1 kHz of the 7-joint arm: the recording of a multisine with sensor noise, the
    last fifth the validation; the result identified on its first 20 s (identifying all of it
    would only take longer: the page draws the recordings)."""
    nominal, truth = load_robot(NOMINAL), load_robot(TRUTH)
    plan = multisine(nominal.joint_range, 600.0, 1000.0, seed=4, max_velocity=1.0)
    recording, validation = _noisy(ideal_recording(truth.model, plan, truth.joint_names), seed=4).split(0.2)
    assert recording.n_samples + validation.n_samples == 600_001
    result = identify(nominal, recording.rows(slice(0, 20_000)), IdentificationConfig(),
                      validation=validation.rows(slice(0, 5_000)))
    document = params_document(result, nominal, "ten minutes", truth=truth)
    path = write_html_report(tmp_path / "report.html", nominal, result, document, recording, validation)
    size = path.stat().st_size
    assert size < MAX_BYTES, f"{size} bytes"
    page = Page(path.read_text())
    assert len(page.sources) == 5
    assert "480.0 s" in page.text["excitation"]  # the whole identification recording is described


def _chromium():
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return path


def _render(chromium, tmp_path, page, *output):
    """chromium headless on ``page`` with ``output`` options; its exit status is checked."""
    run = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile'}", *output, page.as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]


def test_chromium_renders_the_report(identified, failed, tmp_path):
    chromium = _chromium()
    nominal, result, document, recording, validation = identified
    good = write_html_report(tmp_path / "report.html", nominal, result, document, recording, validation)
    pdf = tmp_path / "report.pdf"
    _render(chromium, tmp_path, good, "--no-pdf-header-footer", f"--print-to-pdf={pdf}")
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 50_000  # the figures are in it
    # the failed verdict's banner is red at the top of the page
    shot = tmp_path / "failed.png"
    _render(chromium, tmp_path, failed[0], "--window-size=1000,700", f"--screenshot={shot}")
    import matplotlib.image
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round()
    banner = np.all(np.abs(pixels - [253, 236, 234]) <= 2, axis=-1)  # .failed background #fdecea
    assert banner.sum() > 20_000, banner.sum()


def test_the_cli_writes_report_html_next_to_params_json(tmp_path):
    assert "report.html" in OUTPUTS  # cleared with the rest of a previous run
    out = tmp_path / "out"
    assert main([str(MODELS / "planar_2r.xml"), "--duration", "3", "--source", "ideal",
                 "--output-dir", str(out)]) == 0
    document = json.loads((out / "params.json").read_text())
    page = Page((out / "report.html").read_text())
    assert page.sections[0] == "verdict" and document["verdict"] in page.classes["verdict"].split()
    assert len(page.sources) == 5 and all(s.startswith("data:") for s in page.sources)
    assert "multisine, seed 0, 3 s at 1000 Hz" in page.text["excitation"]
    # --no-plots: the report without its figures
    assert main([str(MODELS / "planar_2r.xml"), "--duration", "3", "--source", "ideal", "--no-plots",
                 "--output-dir", str(out)]) == 0
    assert not Page((out / "report.html").read_text()).sources and not list(out.glob("*.png"))


def test_an_optimized_design_reports_its_gain_over_the_multisines():
    args = SimpleNamespace(trajectory=None, seed=1, sample_rate=500.0, max_velocity=2.0)
    plan = SimpleNamespace(time=np.linspace(0.0, 10.0, 5001))
    check = SimpleNamespace(time=np.linspace(0.0, 5.0, 2501))
    design = SimpleNamespace(criterion="payload", criterion_value=-3.2, initial_criterion_value=-2.9,
                             condition_number_scaled=12.0, condition_number=240.0, condition_cap=18.0,
                             reference_condition=30.0, limits_met=True)
    rows = dict(_excitation_rows(args, plan, design, check))
    assert "2.50 times lower than the multisines' median 30.0" in rows["design"]
    assert rows["validation run"] == "multisine, seed 1001, 5 s"
    uncapped = SimpleNamespace(**{**vars(design), "reference_condition": None, "condition_cap": None})
    rows = dict(_excitation_rows(args, plan, uncapped, check))
    assert "not known" in rows["design"]
