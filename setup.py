import os

from setuptools import find_packages, setup

with open(os.path.join(os.path.dirname(__file__), "sb3_ewma", "version.txt")) as file_handler:
    __version__ = file_handler.read().strip()

with open(os.path.join(os.path.dirname(__file__), "README.md"), encoding="utf-8") as file_handler:
    long_description = file_handler.read()

# what `import sb3_ewma` and every module outside the extras need (tests/test_packaging.py checks the imports)
INSTALL_REQUIRES = [
    "stable-baselines3>=2.9,<3",
    "sb3-contrib>=2.9,<3",  # RecurrentPPO_EWMA, MaskablePPO_EWMA
    "torch>=2.3",
    "gymnasium>=1.0,<2",
    "numpy",
    # scale.py reads rl-zoo3 YAML entries
    "PyYAML",
    # the constructors' keyword arguments (TypedDict and Unpack, PEP 692) on Python 3.10
    "typing_extensions>=4.10",
]

EXTRAS = {
    # procgen-mirror ships the `procgen` module with a wheel for Python 3.11 (the `procgen` distribution has none).
    # procgen-mirror needs gym3, which pins imageio-ffmpeg<0.4; that version imports pkg_resources, which setuptools
    # removed in 81: without the cap, video recording (moviepy) fails to import.
    # procgen-mirror also requires the legacy gym (0.26), whose import prints the notice that gym-notices holds for its
    # version ("Gym has been unmaintained since 2022 ...", 4 lines on stderr), and SB3 imports gym whenever it is
    # installed: gym-notices 0.0.8, the last before 0.1.0, has no notice for gym 0.26, so nothing is printed
    "procgen": ["procgen-mirror>=0.10.7", "setuptools<81", "gym-notices<0.1"],
    # rl_zoo3's enjoy imports `requests` without declaring it; box2d for the LunarLander entries; SB3's extra
    # (ale-py, opencv, tensorboard, tqdm, rich) for the atari entries, logging and progress bars
    "zoo": [
        "rl_zoo3>=2.9,<3",
        "sb3-contrib>=2.9,<3",
        "stable-baselines3[extra]>=2.9,<3",
        "optuna",
        "requests",
        "gymnasium[box2d]",
    ],
    "plots": ["matplotlib", "pandas"],
    # the Sphinx site (docs/): SB3's theme and Markdown pages, MathJax shipped with the pages (no CDN needed)
    "docs": ["sphinx", "sphinx_rtd_theme", "myst-parser", "sphinx-mathjax-offline"],
}
# what a user runs: every optional part but the documentation tools
EXTRAS["all"] = sorted({req for name, reqs in EXTRAS.items() if name != "docs" for req in reqs})
# the benchmarks' statistics (benchmarks/harness/statistics.py, aggregate.py): scipy.stats for the tests, rliable for the
# aggregates across games (interquartile mean, stratified bootstrap, probability of improvement), statsmodels for the
# power of a t-test (also a requirement of rliable's arch). pandas<3: rliable 1.2 requires arch<8, and arch 7.2 fails to
# import with pandas 3 (a TypeError in its deprecate_kwarg), so `import rliable` needs pandas 2
EXTRAS["benchmarks"] = ["rliable>=1.2", "scipy", "pandas<3", "matplotlib", "statsmodels"]
# the environments of rl-zoo3's PPO entries beyond classic control and Box2D (MuJoCo -v4 ids, MiniGrid), and MinAtar:
# python -m benchmarks.learning.zoo_table trains on them, tests/test_zoo_derivation.py builds their derived entries
EXTRAS["tasks"] = ["gymnasium[mujoco]>=1.0,<2", "minigrid>=3", "minatar>=1.0.15"]
# the test suite exercises every optional part, plus the test and style tools (and MinAtar for the benchmarks' tests)
EXTRAS["tests"] = [
    *EXTRAS["all"],
    *EXTRAS["docs"],
    "pytest",
    "pytest-xdist",  # the suite runs on 2 processes (README, "Running the tests")
    "ruff",
    "black",
    "mypy",
    "pyright",  # with mypy, checks tests/static_typing/user_script.py as a user's editor would (.ci/run)
    "build",
    "tensorboard",
    "tqdm",
    "rich",
    *EXTRAS["tasks"],
    *EXTRAS["benchmarks"],
]

setup(
    name="sb3-ewma",
    version=__version__,
    description="PPO-EWMA and PPG-EWMA (batch size-invariant policy optimization) for Stable-Baselines3",
    long_description=long_description,
    long_description_content_type="text/markdown",
    packages=[package for package in find_packages() if package.startswith("sb3_ewma")],
    package_data={"sb3_ewma": ["py.typed", "version.txt", "hyperparams/*.yml"]},
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["sb3-ewma=sb3_ewma.__main__:console_main"]},
    license="MIT",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
