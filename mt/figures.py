"""Figures drawn with matplotlib, the optional extra `pip install 'mt[plot]'`, imported only
here, lazily: drawn on the Agg canvas without pyplot, so that nothing needs a display and no
global matplotlib state (the backend, pyplot's figure list) is touched, and saved atomically."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .files import atomic_path

INSTALL_HINT = "plotting needs matplotlib: pip install 'mt[plot]'"


def figure(**kwargs: Any):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, out: Path) -> Path:
    """Write the PNG atomically: a viewer refreshing it during training never sees half a file."""
    with atomic_path(out, suffix=".png") as tmp, warnings.catch_warnings():
        # Fonts lack some glyphs (emoji); a box in a label is better than a screen of warnings.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(tmp, format="png")
    return out
