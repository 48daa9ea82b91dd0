"""Numbers for people: sizes in the unit that fits, floats without rounding noise."""

import math


def human_bytes(n_bytes: float) -> str:
    """``n_bytes`` in B, kB, MB, GB or TB (powers of 1000), three significant digits: ``"6.44 GB"``, ``"786 kB"``."""
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 999.5:
            return f"{value:.3g} {unit}"
        value /= 1000.0
    return f"{value:.3g} TB"


def without_rounding_noise(value: float, digits: int = 12) -> float:
    """``value`` rounded to ``digits`` significant digits (``7.9999999999999964`` shows as ``8.0``); non-finite as is."""
    if not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits}g}")
