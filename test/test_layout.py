"""The core's wings import one way, downward, with no circle (read from the import statements).

dynamics <- identification <- excitation <- simulation <- damiao <- results <- online <- cli <- fleet; errors sits
below them all. A module may import its own wing and any wing below it, never one above.
"""
import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "sysid_core"
# a wing's rank: a module may import modules of equal or lower rank only
RANKS = {"errors": 0, "dynamics": 1, "identification": 2, "excitation": 3, "simulation": 4, "damiao": 5,
         "results": 6, "online": 7, "cli": 8, "fleet": 9}


def _modules() -> dict:
    """Dotted name -> path of every module of sysid_core (packages as their __init__)."""
    found = {}
    for path in sorted(CORE.rglob("*.py")):
        parts = ("sysid_core",) + path.relative_to(CORE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set:
    """Every sysid_core module ``name`` imports, at any depth of its code (lazy imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # "from package import module" names a module; "from module import name" does not
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] == "sysid_core")
    return found


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_belongs_to_a_wing():
    assert {_wing(m) for m in MODULES} - {""} == set(RANKS)


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _wing(m)))
def test_imports_point_down(name):
    upward = sorted(t for t in _imports(name, MODULES[name]) if _wing(t) and RANKS[_wing(t)] > RANKS[_wing(name)])
    assert not upward, f"{name} imports {upward}, a wing above its own"


def test_no_import_circle():
    graph = {m: {t for t in _imports(m, p) if t in MODULES and t != m} for m, p in MODULES.items()}
    state, circles = {}, []

    def visit(m, stack):  # depth first; an edge back to a module still open closes a circle
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                circles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, f"import circles: {circles}"


def test_core_never_imports_ros():
    ros = {n for path in MODULES.values() for n in _ros_imports(path)}
    assert not ros, f"sysid_core imports {sorted(ros)}"


def _ros_imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names & {"rclpy", "rcl_interfaces", "sensor_msgs", "std_msgs", "std_srvs", "trajectory_msgs",
                    "launch", "launch_ros"}
