# sb3_ewma first: it silences the legacy gym banner that SB3 would print on import (see sb3_ewma._quiet)
import sb3_ewma  # noqa: F401
