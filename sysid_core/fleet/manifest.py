"""The fleet manifest: which robots, their models, their recordings by date, and the options of
every identification.

A YAML file::

    options: {scope: terminal}            # sysid-identify options, as keys (any spelling: a-b or a_b)
    robots:
      - id: arm-01
        model: models/arm.urdf            # MJCF or URDF, relative to the manifest
        options: {payload-frame: flange}  # this robot's own options, over the fleet's (optional)
        recordings:                       # bags or CSV; one period per date (several files may share one)
          - {path: logs/arm-01/day1.mcap, date: 2026-11-01}

A robot's recordings of one date are one identification ("period"), their files separate
stretches in the order listed, exactly as ``sysid-identify MODEL --recording FILE ...`` takes them.
Everything is checked when the manifest is read, so that a mistake stops the run before any work.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import SysidError

# options that name what the manifest gives per robot and period, or outputs of a single run
_REFUSED = {
    "recording": "the recordings come from the manifest",
    "validation_recording": "each period is validated on its own last --validation-fraction",
    "output_dir": "the fleet's outputs go under --output-dir of sysid-fleet",
    "friction_from": "a friction sweep belongs to one arm: run sysid-identify for it",
    "residual": "the residual model reads every sample of one recording: run sysid-identify for it",
    "motor_topic": "the transmission fit reads every sample of one recording: run sysid-identify for it",
    "truth_model": "a fleet has no truth model",
    "export_damiao": "no trajectory is planned in a fleet run",
}
_ID_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@dataclass(frozen=True)
class ModelSpec:
    """A robot's model and the options its periods are identified with: ``path`` the model
    file (absolute), ``options`` the sysid-identify arguments they stand for (str, ...)."""

    path: str
    options: tuple = ()

    def arguments(self) -> argparse.Namespace:
        """The options parsed as sysid-identify parses them (with a placeholder recording)."""
        return _parsed(self.path, self.options)


@dataclass(frozen=True)
class Period:
    """One robot's recordings of one date: ``files`` (str, ...) absolute paths in manifest order."""

    robot: str
    date: datetime.date
    model: ModelSpec
    files: tuple

    @property
    def key(self) -> str:
        """``<robot>/<date>``: the period's name and its folder under the output directory."""
        return f"{self.robot}/{self.date.isoformat()}"


@dataclass(frozen=True)
class Manifest:
    """A read manifest: ``path``, the ``robots`` ids in order, and their ``periods`` (robot
    order, then date order)."""

    path: Path
    robots: tuple
    periods: tuple


def _parser():
    from ..cli import build_parser  # the options are sysid-identify's, checked by its own parser
    return build_parser()


def _parsed(model: str, options: tuple) -> argparse.Namespace:
    parser = _parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return parser.parse_args([model, "--recording", "placeholder.csv", *options])
    except SystemExit:
        message = errors.getvalue().strip().splitlines()
        raise SysidError(f"manifest options: {message[-1] if message else 'not understood'}") from None


def option_arguments(options: dict) -> tuple:
    """sysid-identify's arguments (str, ...) of manifest ``options`` ({name: value}); SysidError for
    a name it does not have or one a fleet cannot take."""
    if not isinstance(options, dict):
        raise SysidError(f"manifest options must be a mapping of option: value, got {options!r}")
    flags = _parser()._option_string_actions
    argv = []
    for key, value in options.items():
        name = str(key).strip().lstrip("-").replace("_", "-")
        action = flags.get(f"--{name}")
        if action is None or name in ("help", "recording"):
            if name.replace("-", "_") in _REFUSED:
                raise SysidError(f"manifest option '{key}': {_REFUSED[name.replace('-', '_')]}")
            raise SysidError(f"manifest option '{key}' is not an option of sysid-identify")
        if action.dest in _REFUSED:
            raise SysidError(f"manifest option '{key}': {_REFUSED[action.dest]}")
        if action.nargs == 0:  # a flag
            if not isinstance(value, bool):
                raise SysidError(f"manifest option '{key}' is a flag: give true or false, got {value!r}")
            argv += [f"--{name}"] if value else []
        elif isinstance(value, (list, tuple)):
            if action.nargs not in ("+", "*"):
                raise SysidError(f"manifest option '{key}' takes one value, got a list {value!r}")
            argv += [f"--{name}", *(str(v) for v in value)]
        elif isinstance(value, (dict, type(None))):
            raise SysidError(f"manifest option '{key}' needs a value, got {value!r}")
        else:
            argv += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return tuple(argv)


def _date(value, where: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise SysidError(f"{where}: date {value!r} is not an ISO date (YYYY-MM-DD)") from None


def load_manifest(path) -> Manifest:
    """The manifest at ``path``, every file it names checked to exist and every option to parse;
    SysidError saying what and where otherwise."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as err:
        raise SysidError(f"cannot read the manifest {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise SysidError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(document, dict) or not isinstance(document.get("robots"), list) or not document["robots"]:
        raise SysidError(f"{path}: a manifest needs 'robots:', a list of robots (id, model, recordings)")
    unknown = set(document) - {"options", "robots"}
    if unknown:
        raise SysidError(f"{path}: unknown keys {sorted(unknown)} (a manifest has 'options' and 'robots')")
    fleet_options = document.get("options") or {}
    option_arguments(fleet_options)
    root = path.resolve().parent
    robots, periods, seen_files = [], [], {}
    for number, entry in enumerate(document["robots"], 1):
        where = f"{path}: robot {number}"
        if not isinstance(entry, dict):
            raise SysidError(f"{where}: expected id, model and recordings, got {entry!r}")
        extra = set(entry) - {"id", "model", "options", "recordings"}
        if extra:
            raise SysidError(f"{where}: unknown keys {sorted(extra)} (a robot has id, model, options, recordings)")
        robot = str(entry.get("id", "")).strip()
        if not robot or not set(robot) <= _ID_CHARACTERS or robot in (".", ".."):
            raise SysidError(f"{where}: id {entry.get('id')!r} must be letters, digits, '-', '_' or '.' "
                             "(it names the robot's folder)")
        if robot in robots:
            raise SysidError(f"{where}: id '{robot}' is given twice")
        where = f"{path}: robot '{robot}'"
        if not entry.get("model"):
            raise SysidError(f"{where}: no model (an MJCF or URDF file, relative to the manifest)")
        model = (root / str(entry["model"])).resolve()
        if not model.is_file():
            raise SysidError(f"{where}: model {model} not found")
        options = dict(fleet_options)
        options.update(entry.get("options") or {})
        spec = ModelSpec(str(model), option_arguments(options))
        spec.arguments()
        recordings = entry.get("recordings")
        if not isinstance(recordings, list) or not recordings:
            raise SysidError(f"{where}: no recordings (a list of {{path, date}})")
        by_date: dict = {}
        for item in recordings:
            if not isinstance(item, dict) or set(item) != {"path", "date"}:
                raise SysidError(f"{where}: a recording is {{path: FILE, date: YYYY-MM-DD}}, got {item!r}")
            file = (root / str(item["path"])).resolve()
            if not file.exists():
                raise SysidError(f"{where}: recording {file} not found")
            if str(file) in seen_files:
                raise SysidError(f"{where}: recording {file} is listed twice (also for {seen_files[str(file)]})")
            seen_files[str(file)] = robot
            by_date.setdefault(_date(item["date"], where), []).append(str(file))
        robots.append(robot)
        periods += [Period(robot, date, spec, tuple(files)) for date, files in sorted(by_date.items())]
    return Manifest(path, tuple(robots), tuple(periods))
