"""The install command that error messages give for an optional part of the package."""


def install_hint(extra: str) -> str:
    """
    The command that installs the extra ``extra``. The package is not on the Python package index yet: it installs
    from a checkout of the repository (run the command in its root).
    """
    return f'`pip install -e ".[{extra}]"` (in the root of the sb3-ewma repository)'
