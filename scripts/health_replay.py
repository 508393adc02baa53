"""Replay runs' metrics through the health checks of this code: what `check_validations` says
at each validation, called as the trainer calls it, and how far the validation NLL rose above
its best after the warm-up (the least of 1, 2 and 3 validations in a row: what `diverged`'s
runaway margin is measured against). The checks do not change what a run computes, so a run
trained with them off, or under an older rule, shows what it would have done under this one.

    python scripts/health_replay.py RUN [RUN ...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

from mt.config_file import config_from_dict
from mt.training.health import Vitals, above_best, check_validations
from mt.training.metrics import read_metrics
from mt.training.schedule import warmup_updates

IN_A_ROW = (1, 2, 3)  # validations in a row whose rise above the best is measured


def replay(run: Path) -> dict:
    """The first verdict of the checks on RUN's validations, and the validation NLL's rise."""
    config = config_from_dict(yaml.safe_load((run / "config.yaml").read_text()), str(run))
    vitals, horizon, verdict = Vitals(), 0, None
    rise = dict.fromkeys(IN_A_ROW, -math.inf)
    for record in read_metrics(run):
        horizon = record.get("horizon") or horizon  # the one the latest update was scheduled by
        if record["kind"] == "train":
            vitals.logged(record["step"], record["nll"], None)
        elif record["kind"] == "valid":
            vitals.validated(record["step"], record["nll"], record["nll_shuffled"], record["bleu"])
            warmup = warmup_updates(config, horizon)
            found = check_validations(config, vitals.train_nlls, vitals.validations, warmup, 0.0)
            verdict = verdict or (found and {"step": record["step"], **found.__dict__})
            for count in IN_A_ROW:
                if len(vitals.validations) > count and vitals.validations[-count][0] > warmup:
                    rise[count] = max(rise[count], above_best(vitals.validations, count))
    valid = vitals.validations
    return {
        "run": str(run),
        "validations": len(valid),
        "last_step": valid[-1][0] if valid else 0,
        "best_nll": min((v[1] for v in valid), default=None),
        "last_nll": valid[-1][1] if valid else None,
        **{f"rise_{count}": rise[count] for count in IN_A_ROW},
        "verdict": verdict,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        print(json.dumps(replay(run)))


if __name__ == "__main__":
    main()
