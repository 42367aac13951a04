"""The manual (doc/) stays true to the code.

- Every option of every console script with an argparse parser is in doc/reference/cli.md, in
  the option table of that script's section, with its default; every option that table names
  exists in the parser.
- Every parameter a node declares is a row of that node's parameter table in
  doc/reference/nodes.md, with its type and default; every row is a declared parameter. The
  declarations are read from the node sources (``declare_parameter('name', default)`` calls,
  found with ``ast``; the identifier's PARAMETERS dict). Every topic and service a node creates
  under a fixed name is named in its section.
- The manual builds with warnings as errors (sphinx-build -W), as ``make docs`` builds it.

Conventions of the tables, which the tests hold the pages to:

- cli.md: each script has a ``## `script` `` section whose table has the columns option,
  default, meaning. The option cell names the option (``--duration S``); the default cell shows
  the default as typed on the command line (``15``, ``terminal``, ``sysid_output``), or a word in
  prose where there is none (none, off, required).
- nodes.md: each node has a ``## `node` `` section with a ``### Parameters`` table of the
  columns parameter, type, default, meaning. The type is the ROS parameter type (bool, integer,
  double, string, string_array, integer_array, double_array); the default is written as in a
  YAML parameter file: ``true``, ``500``, ``500.0``, ``"socketcan"``, ``["coulomb", "viscous"]``,
  and ``(unset)`` for a parameter declared by type without a value.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "doc"
CLI_PAGE = DOC / "reference" / "cli.md"
NODES_PAGE = DOC / "reference" / "nodes.md"

OPTION = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")


# --- reading the pages --------------------------------------------------------------------------

def _sections(text: str, level: int) -> dict:
    """{heading text without backticks: body} of the headings of ``level`` (## is 2)."""
    marker = "#" * level + " "
    sections, name, lines, fence = {}, None, [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        if not fence and line.startswith(marker):
            if name is not None:
                sections[name] = "\n".join(lines)
            name, lines = line[len(marker):].strip().replace("`", ""), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = "\n".join(lines)
    return sections


def _table_rows(text: str) -> list:
    """Cells of every body row of the Markdown tables in ``text`` (header and rule rows skipped)."""
    rows, previous_was_row = [], False
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            previous_was_row = False
            continue
        cells = [cell.strip() for cell in line[1:-1].split("|")]
        if all(re.fullmatch(r":?-{3,}:?", cell) for cell in cells):  # the rule under a header
            if rows and previous_was_row:
                rows.pop()  # the line before it was the header
            previous_was_row = True
            continue
        rows.append(cells)
        previous_was_row = True
    return rows


def _page(path: Path) -> str:
    if not path.is_file():
        pytest.fail(f"{path.relative_to(ROOT)} is missing")
    return path.read_text(encoding="utf-8")


# --- console scripts ----------------------------------------------------------------------------

def _parsers() -> dict:
    from sysid_core.cli import build_parser
    from sysid_core.cli.calibrate import build_calibration_parser
    from sysid_core.fleet.command import build_parser as build_fleet_parser
    from sysid_ros.sim_identify import build_parser as build_sim_parser
    return {"sysid-identify": build_parser(), "sysid-calibrate-effort": build_calibration_parser(),
            "sysid-sim-identify": build_sim_parser(), "sysid-fleet": build_fleet_parser()}


def test_every_console_script_with_a_parser_is_covered():
    """setup.py's console scripts: the argparse ones are tested below, the rest are node executables."""
    text = (ROOT / "setup.py").read_text()
    scripts = set(re.findall(r'"([\w-]+) = [\w.]+:\w+"', text))
    nodes = set(NODE_MODULES)
    assert scripts == set(_parsers()) | nodes, "a console script was added or removed: document it and test it here"


def _cli_default(value) -> str | None:
    """The default as the table shows it (as typed on the command line), None when the cell says it in words."""
    if value is None or value is False or value == [] or value == argparse.SUPPRESS:
        return None
    if isinstance(value, Path):
        # a default inside the package (sysid-sim-identify's bundled model) as the repository names it
        if value.is_absolute() and value.is_relative_to(ROOT):
            return value.relative_to(ROOT).as_posix()
        return value.as_posix()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@pytest.mark.parametrize("script", ["sysid-identify", "sysid-calibrate-effort", "sysid-sim-identify", "sysid-fleet"])
def test_cli_reference_lists_every_option_with_its_default(script):
    parser = _parsers()[script]
    section = _sections(_page(CLI_PAGE), 2).get(script)
    assert section is not None, f"doc/reference/cli.md has no '## `{script}`' section"
    rows = _table_rows(section)
    documented = {}
    for cells in rows:
        for option in OPTION.findall(cells[0]):
            documented[option] = cells
    actions = {option: action for action in parser._actions if action.dest != "help"
               for option in action.option_strings if option.startswith("--")}
    missing = sorted(set(actions) - set(documented))
    assert not missing, f"{script}: options not in the table of doc/reference/cli.md: {missing}"
    unknown = sorted(set(documented) - set(actions))
    assert not unknown, f"{script}: the table of doc/reference/cli.md names options the parser lacks: {unknown}"
    wrong = []
    for option, action in actions.items():
        expected = _cli_default(action.default)
        cells = documented[option]
        if expected is not None and f"`{expected}`" not in cells[1]:
            wrong.append(f"{option}: default cell {cells[1]!r}, expected `{expected}`")
    assert not wrong, f"{script}: " + "; ".join(wrong)


def test_cli_reference_has_one_exit_status_table():
    text = _page(CLI_PAGE)
    sections = _sections(text, 2)
    exits = [name for name in sections if name.lower().startswith("exit status")]
    assert len(exits) == 1, "doc/reference/cli.md needs one '## Exit status' section"
    rows = _table_rows(sections[exits[0]])
    tools = " ".join(cells[0] for cells in rows)
    for name in list(_parsers()) + ["identifier", "damiao_bridge", "sim_identify.launch.py"]:
        assert name in tools, f"the exit status table does not name {name}"


# --- nodes ----------------------------------------------------------------------------------------

NODE_MODULES = {"trajectory_publisher": "sysid_ros.trajectory_publisher", "mujoco_sim": "sysid_ros.mujoco_sim",
                "identifier": "sysid_ros.identifier", "damiao_bridge": "sysid_ros.damiao_bridge",
                "model_monitor": "sysid_ros.model_monitor", "gravity_compensation": "sysid_ros.gravity_compensation"}
UNSET = object()


def _declared_parameters(node: str) -> dict:
    """{name: default} of every parameter the node declares; UNSET-typed ones as ('unset', type name)."""
    module_name = NODE_MODULES[node]
    module = importlib.import_module(module_name)
    source = Path(module.__file__).read_text()
    declared = {}
    for call in ast.walk(ast.parse(source)):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "declare_parameter"):
            continue
        name = call.args[0]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            continue  # the identifier declares from PARAMETERS, read below
        default = eval(compile(ast.Expression(call.args[1]), module.__file__, "eval"), vars(module))
        declared[name.value] = default
    if node == "identifier":
        for name, (default, _text) in module.PARAMETERS.items():
            declared[name] = default
    return declared


def _ros_type(default) -> str:
    from rclpy.parameter import Parameter
    if isinstance(default, Parameter.Type):
        return default.name.lower()
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "integer"
    if isinstance(default, float):
        return "double"
    if isinstance(default, str):
        return "string"
    if isinstance(default, (list, tuple)):
        kinds = {_ros_type(item) for item in default}
        assert len(kinds) == 1, f"mixed list default {default}"
        return f"{kinds.pop()}_array"
    raise AssertionError(f"unexpected parameter default {default!r}")


def _yaml_default(default) -> str:
    from rclpy.parameter import Parameter
    if isinstance(default, Parameter.Type):
        return "(unset)"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float):
        assert math.isfinite(default)
        return repr(default)
    if isinstance(default, (int, str)):
        return json.dumps(default)
    if isinstance(default, (list, tuple)):
        return "[" + ", ".join(_yaml_default(item) for item in default) + "]"
    raise AssertionError(f"unexpected parameter default {default!r}")


def _parameter_table(node: str) -> dict:
    section = _sections(_page(NODES_PAGE), 2).get(node)
    assert section is not None, f"doc/reference/nodes.md has no '## `{node}`' section"
    parameters = _sections(section, 3).get("Parameters")
    assert parameters is not None, f"doc/reference/nodes.md: '## `{node}`' has no '### Parameters' table"
    rows = {}
    for cells in _table_rows(parameters):
        name = cells[0].strip("`")
        assert name not in rows, f"{node}: parameter {name} listed twice"
        rows[name] = cells
    return rows


@pytest.mark.parametrize("node", sorted(NODE_MODULES))
def test_node_reference_lists_every_parameter_with_type_and_default(node):
    declared = _declared_parameters(node)
    assert declared, f"no parameters found in {NODE_MODULES[node]}"
    rows = _parameter_table(node)
    missing = sorted(set(declared) - set(rows))
    assert not missing, f"{node}: declared parameters missing from doc/reference/nodes.md: {missing}"
    unknown = sorted(set(rows) - set(declared))
    assert not unknown, f"{node}: doc/reference/nodes.md lists parameters the node does not declare: {unknown}"
    wrong = []
    for name, default in declared.items():
        cells = rows[name]
        assert len(cells) >= 4, f"{node}.{name}: the row needs parameter, type, default and meaning"
        if cells[1].strip("`") != _ros_type(default):
            wrong.append(f"{name}: type {cells[1]!r}, declared {_ros_type(default)}")
        if cells[2].strip("`") != _yaml_default(default):
            wrong.append(f"{name}: default {cells[2]!r}, declared `{_yaml_default(default)}`")
    assert not wrong, f"{node}: " + "; ".join(wrong)


@pytest.mark.parametrize("node", sorted(NODE_MODULES))
def test_node_reference_names_every_topic_and_service(node):
    section = _sections(_page(NODES_PAGE), 2)[node]
    source = Path(importlib.import_module(NODE_MODULES[node]).__file__).read_text()
    names = set()
    for call in ast.walk(ast.parse(source)):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("create_publisher", "create_subscription", "create_service")
                and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant)):
            names.add(call.args[1].value)
    assert names
    missing = sorted(name for name in names if f"`{name}`" not in section)
    assert not missing, f"{node}: topics or services not named in doc/reference/nodes.md: {missing}"


# --- the build ------------------------------------------------------------------------------------

def test_manual_builds_without_warnings(tmp_path):
    for module in ("sphinx", "myst_parser"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: `make venv` installs requirements-docs.txt")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
               "-d", str(tmp_path / "doctrees"), str(DOC), str(tmp_path / "html")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert (tmp_path / "html" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    """At most 200 lines, `make demo` and `make test` its first two commands, and every link into
    the manual pointing at a page that exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    commands = re.findall(r"^(make \w+)", text, flags=re.MULTILINE)
    assert commands[:2] == ["make demo", "make test"], commands
    for target in re.findall(r"\]\(((?:doc|bench)/[^)#]+)", text):
        assert (ROOT / target).is_file(), target


def test_no_development_history_in_the_repository_text():
    """The repository describes the software as it is: no issue numbers in the code, the
    manual, the README or the benchmarks' notes."""
    history = re.compile(r"\bissues? #?\d+|\bgh-\d+", re.IGNORECASE)
    found = []
    for folder in ("sysid_core", "sysid_ros", "doc", "bench", "launch", "config", "test"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".md", ".yaml", ".xml") or "_build" in path.parts:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if history.search(line) and path.name != "test_docs.py":
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    found += [f"README.md: {line}" for line in (ROOT / "README.md").read_text().splitlines() if history.search(line)]
    assert not found, "\n".join(found)
