"""mt: English→Spanish neural machine translation with the Transformer."""

import os

__version__ = "0.1.0"

# oneDNN, which multiplies bf16 matrices on a CPU (float32 goes to MKL), keeps the kernels it
# made for every shape it has seen, in two caches of 1,024 (ideep's and oneDNN's own): padded
# batches bring new shapes every update, and bf16 training on a CPU grew to 3x float32's
# memory (4.2 GB against 1.45 for the 20-minute recipe). 16 bound it at no cost in speed
# measured (docs/benchmarks.md, "bf16 memory on a CPU"). Set before torch loads (ideep reads
# its size then, oneDNN at its first bf16 product); the environment's own values win.
os.environ.setdefault("LRU_CACHE_CAPACITY", "16")
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
