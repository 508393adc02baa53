"""mt: English→Spanish neural machine translation with the Transformer."""

import os

__version__ = "0.1.0"

# before torch loads, which reads it once: see mt/device.py
os.environ.setdefault("LRU_CACHE_CAPACITY", "16")
