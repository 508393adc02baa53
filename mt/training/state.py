"""The state of a run besides its weights: what an exact resume needs, saved in every
checkpoint's `trainer.pt`, and the clock of a session that adds its training time to it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..data.batches import Position
from .budget import Horizon
from .health import Vitals


@dataclass
class TrainState:
    """Everything besides the weights that an exact resume needs."""

    step: int = 0  # optimiser updates done
    position: Position = field(default_factory=Position)  # of this rank's batches
    best_bleu: float = -1.0
    bad_evals: int = 0  # validations since the best one
    elapsed: float = 0.0  # training seconds over all sessions of this run
    horizon: Horizon = field(default_factory=Horizon)
    vitals: Vitals = field(default_factory=Vitals)  # what the health checks judge
    rng: dict[str, Any] = field(default_factory=dict)  # generator states, one per rank
    world_size: int = 1  # processes that trained the run: an exact resume needs as many
    pack_length: int = 0  # tokens a packed row of the run's batches (0: padded)
    precision: str = ""  # what train.precision auto measured on a CPU, kept ("": not measured)
    carried: int = 0  # the length the last validation measured the model carries (0: none yet)

    def validated(self, bleu: float) -> bool:
        """Count a validation's BLEU: True when it is the best so far (patience starts over)."""
        if bleu > self.best_bleu:
            self.best_bleu, self.bad_evals = bleu, 0
            return True
        self.bad_evals += 1
        return False

    def out_of_patience(self, patience: int) -> bool:
        """Whether `patience` validations in a row (`train.patience`; 0: none) found no better
        BLEU."""
        return bool(patience) and self.bad_evals >= patience

    @staticmethod
    def from_dict(saved: dict[str, Any]) -> TrainState:
        s = dict(saved)
        s["position"], s["horizon"] = Position(**s["position"]), Horizon(**s["horizon"])
        s["vitals"] = Vitals.from_dict(s.get("vitals", {}))
        return TrainState(**s)


class Pace:
    """The clock of a session: counts training time into `state.elapsed` across sessions
    and measures what an update, a validation, a save costs."""

    def __init__(self, clock: Callable[[], float], state: TrainState) -> None:
        self.clock, self.state = clock, state
        self.last = clock()
        self.updates = 0  # in this session

    def lap(self) -> float:
        """Seconds since the last reading, added to the run's training time."""
        now = self.clock()
        seconds, self.last = now - self.last, now
        self.state.elapsed += seconds
        return seconds

    def updated(self) -> float:
        seconds = self.lap()
        self.updates += 1
        self.state.horizon.timed_update(seconds)
        return seconds

    def timed(self, work: Callable[[], Any]) -> tuple[Any, float]:
        """What `work` returns, and the seconds it took."""
        self.lap()
        return work(), self.lap()
