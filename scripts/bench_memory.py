"""Peak resident memory of CPU training in float32 and in bf16: the recipe's model and batches
(tatoeba_cpu.yaml), N updates, each precision in a process of its own (peak memory is a
process's), the peak after every tenth update, and the CPU. Prints one JSON line a precision.

    python scripts/bench_memory.py [--updates 50] [--config tatoeba_cpu.yaml] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile


def worker(precision: str, updates: int, config: str, overrides: list[str], run_dir: str):
    from mt.config_file import load_config
    from mt.training.trainer import Trainer

    items = [f"run.dir={run_dir}", f"train.precision={precision}", "train.max_minutes=0",
             f"train.max_steps={max(updates, 1)}", *overrides]  # fmt: skip
    trainer = Trainer(load_config(config, items))
    peaks = []
    for update in range(1, updates + 1):
        trainer.updater([next(trainer.batches)], 5e-4)
        if update % 10 == 0:
            peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)  # GiB
    print(json.dumps({"precision": precision, "peak_gib_every_10": peaks}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--config", default="tatoeba_cpu.yaml")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--worker", default="")
    parser.add_argument("--run-dir", default="")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.updates, args.config, args.overrides, args.run_dir)
    from mt.device import cpu_info

    name, flags = cpu_info()
    wanted = sorted(flags & {"avx512f", "avx512_bf16", "amx_bf16"})
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as run_dir:
        prepare = [sys.executable, __file__, "--worker", "fp32", "--run-dir", run_dir,
                           "--updates", "0", "--config", args.config]  # fmt: skip
        subprocess.run(prepare, env=env, check=True, capture_output=True)  # data once
        workers = {}
        for precision in ("fp32", "bf16"):  # side by side: a process each
            command = [sys.executable, __file__, "--worker", precision, "--run-dir", run_dir,
                       "--updates", str(args.updates), "--config", args.config]  # fmt: skip
            command += [a for item in args.overrides for a in ("--set", item)]
            workers[precision] = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, text=True
            )
        for worker_process in workers.values():
            out, _ = worker_process.communicate()
            record = json.loads(out.strip().splitlines()[-1])
            print(json.dumps({**record, "cpu": name, "flags": wanted}))


if __name__ == "__main__":
    main()
