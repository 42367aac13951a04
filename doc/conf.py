"""Sphinx configuration of the sysid_ros manual (doc/).

Two ways build it:

- ``make docs`` (or ``sphinx-build -W --keep-going -b html doc doc/_build/html``) from the
  repository: Sphinx with MyST Markdown and the built-in alabaster theme, the versions pinned in
  requirements-docs.txt.
- rosdoc2, as the ROS 2 documentation jobs build a package: it finds this Sphinx project in the
  package's ``doc/`` directory, runs this file from a wrapping conf.py of its own (so ``__file__``
  is then rosdoc2's file, not this one), puts the package directory on ``sys.path``, adds its own
  extensions (autodoc, intersphinx, myst_parser), mocks the dependencies of package.xml that
  cannot be imported, and sets its own theme. Nothing here may depend on being run from doc/.
"""
import importlib.util
import os
import sys

# -- Path setup --------------------------------------------------------------------------------
# The repository root (the parent of doc/) holds sysid_core/ and sysid_ros/: put it first on
# sys.path when this file is run from there, so that autodoc documents the sources next to it
# and not an older installed copy. Under rosdoc2 the parent of the running conf.py is a build
# directory without them, and rosdoc2 puts the package directory on sys.path itself.
_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if os.path.isdir(os.path.join(_ROOT, "sysid_core")) and _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# -- Project information -----------------------------------------------------------------------
project = "sysid_ros"
author = "sysid_ros developers"
copyright = "sysid_ros developers, MIT licence"
release = "0.1.0"
version = "0.1"

# -- General configuration ---------------------------------------------------------------------
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/_build", "Thumbs.db", ".DS_Store"]
# rosdoc2 releases that copy doc/ into the root of their build directory also write a landing
# page index.rst there, beside this project's index.md: keep index.md as the root. (Releases that
# copy doc/ into a subdirectory keep their index.rst as the root and list these pages under it.)
_CONF_DIR = os.path.dirname(os.path.abspath(__file__))
if all(os.path.isfile(os.path.join(_CONF_DIR, name)) for name in ("index.md", "index.rst")):
    exclude_patterns.append("index.rst")
# a page's sections get anchors (#a-heading) for links between pages, down to ###
myst_heading_anchors = 3
# $...$ maths and definition lists are not used; keep MyST to CommonMark + tables + directives
myst_enable_extensions = []
nitpicky = False

# -- autodoc -----------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = False
napoleon_numpy_docstring = True

# Modules the code imports that may be missing where the manual is built: mocked only when they
# cannot be imported (the .venv of `make venv` has them all, so nothing is mocked there). The ROS 2
# client libraries (sysid_ros imports them), MuJoCo (no rosdep key: rosdoc2 cannot know it) and
# the optional libraries of sysid_core.
_MAYBE_MISSING = (
    "rclpy", "rcl_interfaces", "builtin_interfaces", "std_msgs", "std_srvs", "sensor_msgs",
    "geometry_msgs", "trajectory_msgs", "diagnostic_msgs", "rosgraph_msgs", "launch", "launch_ros",
    "mujoco", "can", "rosbags", "sklearn", "matplotlib", "yaml",
)


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


autodoc_mock_imports = [name for name in _MAYBE_MISSING if _missing(name)]

# -- HTML output -------------------------------------------------------------------------------
html_theme = "alabaster"  # built into Sphinx; rosdoc2 replaces it with the ROS theme
html_title = "sysid_ros manual"
html_static_path = []
# alabaster's options; rosdoc2 (which defines rosdoc2_settings before running this file) sets a
# theme of its own that would warn about them
if "rosdoc2_settings" not in globals():
    html_theme_options = {
        "description": "Robot-arm dynamics identification with ROS 2",
        "fixed_sidebar": True,
    }


def _keep_mock_imports(app, config):
    """Some rosdoc2 versions replace autodoc_mock_imports by their own list after running this
    file: add ours back once the configuration is complete."""
    mocked = list(getattr(config, "autodoc_mock_imports", None) or [])
    config.autodoc_mock_imports = mocked + [name for name in autodoc_mock_imports if name not in mocked]


def setup(app):
    app.connect("config-inited", _keep_mock_imports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
