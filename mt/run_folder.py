"""The run folder's layout: the one place its names are spelled.

<run.dir>/README.md          what each file is, for a person (RUN_README)
<run.dir>/config.yaml        the resolved config (mt prepare, mt train)
<run.dir>/tokenizer.json     the joint tokenizer, or tokenizer.<lang>.json each side
<run.dir>/data/              the prepared corpus cache (mt.data.prepare, mt.data.store):
    meta.json                    its fingerprint, statistics and store layout
    <split>.<side>.tokens        token ids; <split>.<side>.offsets where sentences begin
    valid.jsonl, test.jsonl      the held-out splits' text
<run.dir>/checkpoints/       step folders and the `best` and `last` links (mt.checkpoint):
    step-00001000/model.safetensors, step-00001000/trainer.pt
<run.dir>/metrics.jsonl      the training and validation records (mt.training.metrics)
<run.dir>/init.json          where a fine-tuned run started from (mt.training.finetune)
<run.dir>/training.png       mt plot's picture
"""

from __future__ import annotations

import re
from pathlib import Path

CONFIG = "config.yaml"
DATA = "data"
CHECKPOINTS = "checkpoints"
BEST, LAST = "best", "last"  # links in CHECKPOINTS
METRICS = "metrics.jsonl"
INIT = "init.json"
PLOT = "training.png"
README = "README.md"
META = "meta.json"  # in DATA
WEIGHTS, TRAINER = "model.safetensors", "trainer.pt"  # in a step folder
STEP_DIR = re.compile(r"^step-(\d+)$")

RUN_README = """\
# An `mt` run folder

- `config.yaml`: the resolved configuration of the run (every key, defaults included).
- `{tokenizer}` (and its target-side twin if the vocabularies are separate): the byte-level
  BPE (or unigram) tokenizer in the standard `tokenizers` format. Outside `mt`:

      tok = tokenizers.Tokenizer.from_file("{tokenizer}")
      tok.encode_special_tokens = True   # a literal "</s>" in a sentence is text (not saved)
      ids = tok.encode(sentence).ids     # ends with </s> (id 2): what the encoder reads

  Ids 0-3 are <pad> <s> </s> <unk>. The decoder starts from <s>; `tok.decode(ids)` drops
  the special tokens.
- `init.json` (fine-tuned runs only): the checkpoint the run started from.
- `data/`: the cleaned, split and encoded corpus: per split and side, `*.tokens` (token ids,
  uint16, or int32 for vocabularies over 65,536), `*.offsets` (int64, where each sentence
  begins), memory-mapped, and `*.counts` (int64, how often each token id occurs);
  `valid.jsonl` and `test.jsonl` hold their text; `meta.json` the statistics and the layout.
- `metrics.jsonl`: one JSON object a line, `"kind": "train"` or `"valid"`.
- `checkpoints/step-N/`: `model.safetensors` (weights; its metadata holds the config and both
  tokenizers) and `trainer.pt` (optimiser and position, for an exact resume). `last` and
  `best` (by validation BLEU) point at step folders.
"""


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def data_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / DATA


def step_dir(ckpt_dir: Path, step: int) -> Path:
    """The folder of the checkpoint saved after update `step`."""
    return ckpt_dir / f"step-{step:08d}"


def tokenizer_files(run_dir: Path, src_lang: str, tgt_lang: str, joint: bool) -> tuple[Path, Path]:
    """Where a run keeps its tokenizers: tokenizer.json, or tokenizer.<lang>.json each."""
    if joint:
        return run_dir / "tokenizer.json", run_dir / "tokenizer.json"
    return run_dir / f"tokenizer.{src_lang}.json", run_dir / f"tokenizer.{tgt_lang}.json"


def store_files(data: Path, split: str, side: str) -> tuple[Path, Path]:
    """A split's side in the prepared store: its token ids and its offsets."""
    return data / f"{split}.{side}.tokens", data / f"{split}.{side}.offsets"


def held_out_text(data: Path, split: str) -> Path:
    """A held-out split's text, one JSON pair a line."""
    return data / f"{split}.jsonl"
