"""The install command that error messages give for an optional part of the package."""


def install_hint(extra: str) -> str:
    """The command that installs the extra ``extra`` from a checkout of the repository."""
    return f'`pip install -e ".[{extra}]"` (in the root of the sb3-ewma repository)'
