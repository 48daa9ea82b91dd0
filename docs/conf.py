"""
Configuration of the Sphinx documentation (in Stable-Baselines3's layout: MyST Markdown pages, the API from docstrings).

Build it from the repository root with warnings as errors, as CI does (``pip install -e ".[docs]"`` first):
``python -m sphinx -W --keep-going -b html docs docs/_build/html``
"""

import datetime
import os
import sys

# the package from this checkout (autodoc imports it)
sys.path.insert(0, os.path.abspath(".."))

with open(os.path.join(os.path.dirname(__file__), "..", "sb3_ewma", "version.txt")) as file_handler:
    __version__ = file_handler.read().strip()

# -- Project information -----------------------------------------------------

project = "sb3-ewma"
_year = datetime.date.today().year
copyright = "2026, sb3-ewma contributors" if _year <= 2026 else f"2026-{_year}, sb3-ewma contributors"
author = "sb3-ewma contributors"
version = __version__
release = __version__

# -- General configuration ---------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",
    # MathJax 3 shipped with the docs (the package of that name on PyPI): the math renders without a CDN.
    # It sets mathjax_path to the copy it adds to _static/mathjax.
    "sphinx-mathjax-offline",
]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}
# the type hints name torch, gymnasium and SB3 types that are not documented here
nitpicky = False

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
master_doc = "index"
language = "en"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
pygments_style = "sphinx"

# -- Options for HTML output -------------------------------------------------

html_theme = "sphinx_rtd_theme"
html_static_path = ["_static"]
html_title = f"sb3-ewma {__version__}"
htmlhelp_basename = "sb3ewmadoc"


def setup(app):  # type: ignore[no-untyped-def]
    app.add_css_file("css/sb3_ewma.css")
