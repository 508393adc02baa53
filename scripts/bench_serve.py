"""Load test of `mt serve`: concurrent clients for a fixed time, against `mt translate` on the
same sentences in one batch.

The server (`mt serve MODEL --port 0 --device cpu --set decode.beam=B`) runs in a process of
its own on 127.0.0.1, and nowhere else: each of --clients threads keeps one connection and
sends one test sentence a request, the next as soon as the answer comes, for --seconds (at
most --max-requests in all). Then SIGTERM, which must stop the server with exit 0. `mt
translate`'s speed is its decoding of all the sentences in one call (what `mt translate --file
F --beam B --device cpu` does once the model is loaded), measured in this process before and
after the load, with the server stopped. Prints one JSON object.

    python scripts/bench_serve.py runs/bench/tatoeba_cpu \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz [--clients 64 --seconds 60]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

from benchkit import health, serving


def load(address: str, bodies: list[dict], clients: int, seconds: float, limit: int) -> dict:
    """`clients` threads sending one of `bodies` (/translate's JSON) a request, in turn, until
    `seconds` or `limit` requests."""
    sent = itertools.count()  # next() is atomic under the GIL: the request budget
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        connection = http.client.HTTPConnection(address, timeout=60)
        start.wait()
        for k in itertools.count(i * len(bodies) // clients):
            if time.perf_counter() >= deadline or next(sent) >= limit:
                break
            body = json.dumps(bodies[k % len(bodies)])
            began = time.perf_counter()
            try:
                connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = json.loads(response.read())
            except (OSError, http.client.HTTPException, ValueError) as e:
                errors.append(f"{type(e).__name__}: {e}")
                connection.close()
                continue
            if response.status != 200 or not isinstance(answer.get("translatedText"), str):
                errors.append(f"{response.status}: {answer}")
                continue
            latencies[i].append(time.perf_counter() - began)
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    deadline = time.perf_counter() + seconds
    began = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    times = sorted(t for per_client in latencies for t in per_client)
    return {
        "requests": len(times) + len(errors),
        "answered": len(times),
        "errors": len(errors),
        "first_errors": errors[:5],
        "seconds": elapsed,
        "sentences_per_s": len(times) / elapsed,
        "p50_ms": 1000 * times[len(times) // 2] if times else None,
        "p99_ms": 1000 * times[min(len(times) - 1, int(len(times) * 0.99))] if times else None,
    }


def one_batch(model: str, sentences: list[str], beam: int, threads: int) -> float:
    """Sentences/s of mt translate's decoding of all `sentences` in one call, on the CPU."""
    import torch

    from mt.decoding.engine import open_translator

    torch.set_num_threads(threads)

    translator = open_translator(model, device="cpu", decode=[f"decode.beam={beam}"])
    translator.translate_nbest(sentences[:64])  # warm up, as the server does
    started = time.perf_counter()
    translator.translate_nbest(sentences)
    return len(sentences) / (time.perf_counter() - started)


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    s = r["server"]
    return [
        "## Serving: `mt serve` under load",
        "",
        f"Model `{r['model']}`; {r['clients']} concurrent clients on 127.0.0.1, each sending "
        "one Tatoeba test "
        f"sentence a request and the next as soon as the answer came, for {r['seconds']:.0f} s; "
        f"beam {r['beam']}, CPU, {r['threads']} thread(s) each, the server in a process of its "
        f"own (batches of at most "
        f"{r['batch_texts']} texts, waiting up to {r['batch_wait_ms']:g} ms for more). `mt "
        f"translate`: all {r['sentences']} sentences in one call (its decoding, the model "
        "already loaded), in the same run, before and after the load. Machine: "
        f"{r['cpu']}, shared with "
        "other work while it ran: the ratio, measured side by side, is what counts. "
        f"Command: `{r['command']}`.",
        "",
        "| | sentences/s | p50 latency | p99 latency | errors |",
        "|---|---:|---:|---:|---:|",
        f"| mt serve, {r['clients']} clients, {s['answered']:,} requests | "
        f"{s['sentences_per_s']:.1f} | {s['p50_ms']:.0f} ms | {s['p99_ms']:.0f} ms | "
        f"{s['errors']} |",
        f"| mt translate, one batch | {r['one_batch_per_s']:.1f} | | | |",
        "",
        f"**Throughput of the server / mt translate: {r['ratio']:.0%}** (mt translate "
        f"{' and '.join(f'{x:.1f}' for x in r['one_batch_runs'])} sentences/s before and after). "
        f"The decoder's batches held {r['mean_batch']:.1f} texts on average; SIGTERM at the end "
        f"stopped the server in {r['stop_seconds']:.1f} s with exit {r['stop_exit']}.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="run folder, checkpoint, or a folder from mt export")
    parser.add_argument("--pairs", required=True, help="test pairs (.jsonl.gz): their English")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-texts", type=int, default=64)
    parser.add_argument("--batch-wait-ms", type=float, default=10.0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads of both (OMP_NUM_THREADS): on a "
        "shared machine, more threads wait on each other at every operator",
    )
    parser.add_argument("--log", type=Path, help="the server's stderr (default: dropped)")
    parser.add_argument("--markdown", action="store_true", help="print the docs section too")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the server's
    from mt.data.corpus import read_pairs_jsonl

    sentences = [src for src, _ in read_pairs_jsonl(args.pairs, "en", "es")]
    runs = [one_batch(args.model, sentences, args.beam, args.threads)]
    options = [
        *("--device", "cpu", "--set", f"decode.beam={args.beam}"),
        *("--batch-texts", str(args.batch_texts), "--batch-wait-ms", str(args.batch_wait_ms)),
        *("--max-requests", str(max(256, 2 * args.clients))),
    ]
    with serving(args.model, *options, log=args.log) as address:
        before = health(address)
        english = [{"q": s, "source": "en", "target": "es"} for s in sentences]
        server = load(address, english, args.clients, args.seconds, args.max_requests)
        after = health(address)
    runs.append(one_batch(args.model, sentences, args.beam, args.threads))
    from mt.device import cpu_description

    result = {
        "model": args.model,
        "clients": args.clients,
        "seconds": args.seconds,
        "beam": args.beam,
        "batch_texts": args.batch_texts,
        "batch_wait_ms": args.batch_wait_ms,
        "threads": args.threads,
        "sentences": len(sentences),
        "server": server,
        "mean_batch": (after["texts"] - before["texts"])
        / max(1, after["batches"] - before["batches"]),
        "one_batch_runs": runs,
        "one_batch_per_s": statistics.mean(runs),
        "ratio": server["sentences_per_s"] / statistics.mean(runs),
        "stop_exit": serving.stopped["exit"],
        "stop_seconds": serving.stopped["seconds"],
        "cpu": cpu_description(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": shlex.join(["python", "scripts/bench_serve.py", *sys.argv[1:]]),
    }
    if args.markdown:
        print("\n".join(render(result)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
