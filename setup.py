"""sysid_ros: an ament_python ROS 2 package, also pip-installable without ROS.

colcon builds it like any ament_python package; on a bare machine use
``pip install -r requirements.txt && pip install -e . --no-deps`` (what ``make venv`` does).
"""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "sysid_ros"


def _share(subdir, pattern):
    """A data_files entry installing files matching ``pattern`` into share/sysid_ros/subdir.

    Returns None when nothing matches (e.g. the folder does not exist yet), so a missing
    folder never breaks the build.
    """
    files = sorted(f for f in glob(pattern) if not f.endswith("~"))
    target = f"share/{PACKAGE}" + (f"/{subdir}" if subdir else "")
    return (target, files) if files else None


data_files = [
    ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
    (f"share/{PACKAGE}", ["package.xml"]),
]
data_files += filter(None, [
    _share("launch", "launch/*.launch.py"),
    _share("config", "config/*.yaml"),
    _share("config/robots", "config/robots/*.xml"),
])

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Robot-arm dynamics identification from MuJoCo models, with ROS 2 nodes",
    maintainer="sysid_ros developers",
    maintainer_email="sysid@example.com",
    license="MIT",
    packages=find_packages(exclude=["test", "test.*", "bench", "bench.*"]),
    data_files=data_files,
    python_requires=">=3.10",
    # Lower bounds only; requirements.txt holds the exact, tested pins. rclpy and the
    # message packages come from ROS (package.xml) or the ros-* wheels in requirements.txt.
    install_requires=[
        "mujoco>=3.2",  # MjSpec
        "numpy>=1.24",
        "scipy>=1.10",
        "sympy>=1.12",
        "pyyaml>=6.0",
        "python-can>=4.0",
        "rosbags>=0.10",  # rosbag2 recordings (sysid-identify --recording)
        "matplotlib>=3.5",  # the PNG figures next to params.json
        "scikit-learn>=1.3",  # the GMM residual model
        "dask[distributed]>=2024.8",  # sysid-fleet's cluster (sysid_core.fleet.cluster only)
    ],
    extras_require={
        "test": ["pytest", "hypothesis", "pin"],
        "bench": ["pin"],
    },
    entry_points={
        "console_scripts": [
            "sysid-identify = sysid_core.cli:main",
            "sysid-calibrate-effort = sysid_core.cli.calibrate:calibrate_main",
            "sysid-fleet = sysid_core.fleet.command:main",
            "trajectory_publisher = sysid_ros.trajectory_publisher:main",
            "mujoco_sim = sysid_ros.mujoco_sim:main",
            "identifier = sysid_ros.identifier:main",
            "sysid-sim-identify = sysid_ros.sim_identify:main",
            "damiao_bridge = sysid_ros.damiao_bridge:main",
            "gravity_compensation = sysid_ros.gravity_compensation:main",
            "model_monitor = sysid_ros.model_monitor:main",
        ],
    },
    zip_safe=True,
)
