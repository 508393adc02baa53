"""The processes of a run: one, or many under `torchrun`, each with its rank and device,
and the signals that stop them all.

Ranks step together and must take every decision alike. After each update every rank
proposes an `Agreement` (a signal it caught, whether its clock says the budget is spent, a
horizon it fitted) and all take the one rank 0 decides from all proposals. With one process
every call here is a no-op that returns what it was given.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..device import pick_device


@dataclass
class Agreement:
    """What one rank proposes after an update, and what rank 0 decides for all of them."""

    signal: int = 0  # the number of a stop signal caught (0: none)
    out_of_time: bool = False  # the wall-clock budget is spent
    horizon: int = 0  # a horizon fitted again (0: keep the current one)

    @staticmethod
    def combine(proposals: list[Agreement]) -> Agreement:
        """Any rank's signal or spent budget stops every rank; the horizon is rank 0's."""
        return Agreement(
            signal=max(p.signal for p in proposals),
            out_of_time=any(p.out_of_time for p in proposals),
            horizon=proposals[0].horizon,
        )


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """The states of the generators a process draws from: the CPU's, and the GPU's on one."""
    states = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_state(device: torch.device, states: dict[str, torch.Tensor]) -> None:
    """Put the generators back as `rng_state` found them (a GPU's only where it was saved)."""
    torch.set_rng_state(states["cpu"])
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)


class Ranks:
    """Rank, world size and device of this process; the process group under torchrun."""

    def __init__(self, device: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.main = self.rank == 0
        self.device = pick_device(device, int(os.environ.get("LOCAL_RANK", "0")))
        cuda = self.device.type == "cuda"
        if cuda:  # each GPU process binds its own device before the first collective:
            torch.cuda.set_device(self.device)  # else NCCL may put every context on GPU 0
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group(
                "nccl" if cuda else "gloo", device_id=self.device if cuda else None
            )

    def agree(self, mine: Agreement) -> Agreement:
        """Rank 0's decision from every rank's proposal: one all-gather of a few integers."""
        if self.world == 1:
            return Agreement.combine([mine])
        row = torch.tensor(dataclasses.astuple(mine), dtype=torch.int64, device=self.device)
        rows = [torch.empty_like(row) for _ in range(self.world)]
        dist.all_gather(rows, row)
        return Agreement.combine(
            [Agreement(s, bool(o), h) for s, o, h in torch.stack(rows).tolist()]
        )

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the ranks in place, on its device: the host waits for nothing."""
        if self.world > 1:
            dist.all_reduce(tensor, dist.ReduceOp.SUM)
        return tensor

    def broadcast(self, values: list[float]) -> list[float]:
        """Rank 0's numbers on every rank (the others pass placeholders of the same length)."""
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, 0)
        return tensor.tolist()

    def gather(self, mine: Any) -> list[Any]:
        """Every rank's `mine` in rank order on rank 0; an empty list on the others."""
        if self.world == 1:
            return [mine]
        out = [None] * self.world
        dist.gather_object(mine, out if self.main else None, dst=0)
        return out if self.main else []

    def rng_states(self) -> dict[str, list[torch.Tensor]]:
        """Every rank's generator states, indexed by kind then rank, on rank 0 (empty on the
        others): what an exact resume restores, each rank its own."""
        ranks = self.gather(rng_state(self.device))
        return {key: [rank[key] for rank in ranks] for key in ranks[0]} if ranks else {}

    def restore_rng(self, saved: dict[str, list[torch.Tensor]]) -> None:
        """Set this rank's generators to its states in `saved` (as `rng_states` gathered)."""
        set_rng_state(self.device, {key: states[self.rank] for key, states in saved.items()})

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as it trains: DistributedDataParallel averages its gradients over ranks."""
        return torch.nn.parallel.DistributedDataParallel(model) if self.world > 1 else model

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        if self.world > 1:
            dist.destroy_process_group()


class StopSignal:
    """Turns SIGINT/SIGTERM into a flag: the current update finishes, then the run saves.

    A signal stops the run once the ranks have agreed on it (`agreed`): one that arrives
    while they agree on another update's proposals waits for the next, so that no rank
    stops while another goes on."""

    def __init__(self) -> None:
        self.caught: signal.Signals | None = None  # by this process
        self.stopping: signal.Signals | None = None  # agreed by every rank
        self.previous = {}

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.caught = signal.Signals(signum)

    def agreed(self, number: int) -> None:
        """The signal the ranks agreed to stop for (0: none)."""
        if number and not self.stopping:
            self.stopping = signal.Signals(number)

    @property
    def name(self) -> str:
        """The agreed signal's name ("" for none), and whether another process caught it."""
        if not self.stopping:
            return ""
        return self.stopping.name + (
            "" if self.caught == self.stopping else " (to another process)"
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
