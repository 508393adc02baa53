"""`mt serve` tried as an attacker would, on 127.0.0.1 only: each class of hostile request of
issue 42 sent to a server with its default limits, and per class its answer, the seconds to
it, the server's peak memory above idle (VmHWM, reset before each class), the seconds until
that memory is back, and the worst /health latency meanwhile; for a client that leaves a long
/translate, the server's CPU seconds a second 5 s after it left. Prints one JSON object (and
the docs/benchmarks.md section with --markdown).

    python scripts/bench_abuse.py runs/tatoeba_cpu [--markdown]
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import select
import shlex
import socket
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import serving  # the server in a process of its own, stopped with SIGTERM

MB = 1 << 20
SENTENCE = "The old man walked slowly along the river, thinking about the long winter ahead. "


def multipart(name: str, data: bytes, header: str = "") -> tuple[bytes, str]:
    head = f'--B\r\nContent-Disposition: form-data; name="file"; filename="{name}"{header}\r\n'
    return head.encode() + b"\r\n" + data + b"\r\n--B--\r\n", "multipart/form-data; boundary=B"


def docx_template() -> bytes:
    import docx

    out = io.BytesIO()
    docx.Document().save(out)
    return out.getvalue()


def odt_template() -> bytes:
    import odfdo

    out = io.BytesIO()
    odfdo.Document("text").save(out)
    return out.getvalue()


W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def docx_bomb() -> bytes:
    """A .docx whose document.xml is a bzip2 member of 1.1 GB (issue 42's: 38 KB)."""
    info = zipfile.ZipInfo("word/document.xml")
    info.compress_type = zipfile.ZIP_BZIP2
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_template())) as old, zipfile.ZipFile(out, "w") as new:
        for item in old.infolist():
            if item.filename != info.filename:
                new.writestr(item, old.read(item.filename), zipfile.ZIP_DEFLATED)
        with new.open(info, "w", force_zip64=True) as member:
            member.write(f"<w:document {W}><w:body><w:p><w:r><w:t>".encode())
            spaces = b" " * MB
            for _ in range(1100):
                member.write(spaces)
            member.write(b"</w:t></w:r></w:p></w:body></w:document>")
    return out.getvalue()


def docx_paragraphs(count: int = 500_000) -> bytes:
    """A .docx of `count` empty paragraphs (issue 42's: 117 KB)."""
    xml = f"<w:document {W}><w:body>{'<w:p/>' * count}</w:body></w:document>"
    return zip_with(docx_template(), "word/document.xml", xml.encode())


def odt_paragraphs(count: int, styled: bool = False) -> bytes:
    """An .odt of `count` empty paragraphs (issue 42's: 117 KB of 21 MB XML), `styled` each
    with one of 1,000 styles (compresses less: more paragraphs fit under the ratio cap)."""
    with zipfile.ZipFile(io.BytesIO(odt_template())) as old:
        content = old.read("content.xml").decode()
    style = ' text:style-name="P{}"' if styled else ""
    body = "".join(f"<text:p{style.format(i % 1000)}/>" for i in range(count))
    xml = content.replace("<office:text>", f"<office:text>{body}", 1)
    if xml == content:
        xml = content.replace("<office:text/>", f"<office:text>{body}</office:text>", 1)
    return zip_with(odt_template(), "content.xml", xml.encode())


def zip_with(template: bytes, name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(template)) as old, zipfile.ZipFile(out, "w") as new:
        for item in old.infolist():
            content = data if item.filename == name else old.read(item.filename)
            method = zipfile.ZIP_STORED if item.filename == "mimetype" else zipfile.ZIP_DEFLATED
            new.writestr(item.filename, content, method)
    return out.getvalue()


def nested_divs(count: int = 77_000) -> bytes:
    """HTML of `count` nested <div> (issue 54's: 385 KB, 17.9 s)."""
    return ("<div>" * count + "Hello.").encode()


def reopened(elements: int = 300, paragraphs: int = 4_000) -> bytes:
    """HTML whose parser reopens `elements` formatting elements in each of `paragraphs`
    paragraphs (issue 54's: 19 KB, 1.2 million elements, +476 MB)."""
    opened = "".join(f"<b id={i}>" for i in range(elements))
    return ("<p>" + opened + "<p>x" * paragraphs).encode()


def post(address: str, path: str, body: bytes, kind: str, timeout: float = 120) -> int:
    connection = http.client.HTTPConnection(address, timeout=timeout)
    try:
        connection.request("POST", path, body, {"Content-Type": kind})
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException) as e:
        return f"{type(e).__name__}"
    finally:
        connection.close()


def post_json(address: str, path: str, fields: dict) -> int:
    return post(address, path, json.dumps(fields).encode(), "application/json")


def huge_headers(address: str, size: int = 64 * MB, line: bool = False) -> str:
    """Headers of `size` bytes (8 KB lines, or one `line`) sent 8 KB at a time until the
    server answers or closes: its status and the bytes sent by then. Each piece waits up to
    1 ms for an answer, so that what is counted is what the server let in, not what the
    kernel's buffers took while it decided."""
    host, port = address.split(":")
    piece = b"a" * 8192 if line else b"X-Pad: " + b"a" * 8183 + b"\r\n"
    sent, answer = 0, b""
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + (b"X-Pad: " if line else b""))
        try:
            while sent < size and not answer:
                raw.sendall(piece)
                sent += len(piece)
                if select.select([raw], [], [], 0.001)[0]:
                    answer = raw.recv(100) or b"closed"
        except OSError:  # closed by the server (a reset drops its answer)
            answer = answer or b"closed"
    status = answer.split()[1].decode() if answer.startswith(b"HTTP/") else answer.decode()
    return f"{status} after {sent / MB:.2f} MB sent"


def slow_connections(address: str, count: int = 300, seconds: float = 30) -> str:
    """`count` connections each sending a header byte a second; how they ended."""
    host, port = address.split(":")
    sockets = [socket.create_connection((host, int(port)), timeout=60) for _ in range(count)]
    answers: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    for raw in sockets:
        raw.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        raw.setblocking(False)
    alive = list(sockets)
    while alive and time.monotonic() < deadline:
        time.sleep(1)
        for raw in list(alive):
            try:
                raw.send(b"a")
                data = raw.recv(100)
            except BlockingIOError:
                continue
            except OSError:
                data = b"closed"
            key = data.split(b"\r\n")[0].decode(errors="replace") or "closed"
            answers[key] = answers.get(key, 0) + 1
            alive.remove(raw)
    for raw in sockets:
        raw.close()
    answers["still open"] = len(alive)
    return ", ".join(f"{k}: {v}" for k, v in answers.items() if v)


def leave_long_translate(address: str, pid: int) -> str:
    """A maximal /translate (64 texts of 1,000 characters) left after 1 s; the server's CPU
    seconds a second over the second from 5 s after."""
    texts = [(SENTENCE * 13)[:1000] for _ in range(64)]
    body = json.dumps({"q": texts, "source": "en", "target": "es"}).encode()
    host, port = address.split(":")
    with socket.create_connection((host, int(port))) as raw:
        head = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        raw.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(1)
    time.sleep(5)
    before = cpu_seconds(pid)
    time.sleep(1)
    return f"{cpu_seconds(pid) - before:.2f} CPU-s/s 5 s after leaving"


def cpu_seconds(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int, key: str) -> float:
    """VmRSS or VmHWM of `pid`, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


class HealthWatch:
    """/health asked every 50 ms from a thread: the worst latency, in ms."""

    def __init__(self, address: str) -> None:
        self.address, self.worst, self.failed, self.done = address, 0.0, 0, False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done:
            started = time.perf_counter()
            try:
                connection = http.client.HTTPConnection(self.address, timeout=30)
                connection.request("GET", "/health")
                ok = connection.getresponse().status == 200
                connection.close()
            except (OSError, http.client.HTTPException):
                ok = False
            self.failed += not ok
            self.worst = max(self.worst, (time.perf_counter() - started) * 1000)
            time.sleep(0.05)

    def stop(self) -> tuple[float, int]:
        self.done = True
        self.thread.join()
        return self.worst, self.failed


def measure(address: str, pid: int, name: str, attack: Callable[[], object]) -> dict:
    """One class: its answer and seconds, peak memory above idle, memory back, /health."""
    time.sleep(1)
    idle = memory(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    watch = HealthWatch(address)
    started = time.perf_counter()
    answer = attack()
    seconds = time.perf_counter() - started
    peak = memory(pid, "VmHWM") - idle
    worst, failed = watch.stop()
    back = time.perf_counter()
    while memory(pid, "VmRSS") > idle + 20 and time.perf_counter() - back < 10:
        time.sleep(0.1)
    row = {
        "class": name,
        "answer": answer,
        "seconds": round(seconds, 2),
        "peak_mb": round(peak, 1),
        "memory_back_s": round(time.perf_counter() - back, 1),
        "held_mb": round(memory(pid, "VmRSS") - idle, 1),  # above idle once back, or at 10 s
        "health_worst_ms": round(worst, 1),
        "health_failed": failed,
    }
    print(json.dumps(row), file=sys.stderr)
    return row


def classes(address: str, pid: int) -> list[tuple[str, Callable[[], object]]]:
    docx, many = docx_bomb(), docx_paragraphs()
    divs, reopen = nested_divs(), reopened()
    odt, styled = odt_paragraphs(21 * MB // 9), odt_paragraphs(470_000, styled=True)
    glossary = {f"w{i}": f"v{i}" for i in range(20_000)}  # 360 KB: under the body's limit
    header = "; a=b" * 74_000

    def four_bombs() -> list:
        found: list = [None] * 4

        def one(i: int) -> None:
            found[i] = post(address, "/translate_file", *multipart("b.docx", docx))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return found

    def file(name: str, data: bytes) -> Callable[[], object]:
        return lambda: post(address, "/translate_file", *multipart(name, data))

    html = {"q": "<!---->" * 28 + "x", "format": "html"}
    return [
        ("html: 28 empty comments (231 B)", lambda: post_json(address, "/translate", html)),
        ("srt: 1,200 digits", file("a.srt", b"1" * 1200)),
        ("srt: 2,000 digits", file("a.srt", b"1" * 2000)),
        ("srt: 20,000 spaces", file("a.srt", b" " * 20_000)),
        (
            "glossary: 20,000 entries",
            lambda: post_json(address, "/translate", {"q": "Hello.", "glossary": glossary}),
        ),
        (
            "multipart: 74,000 header parameters",
            lambda: post(address, "/translate_file", *multipart("a.txt", b"Hi.", header)),
        ),
        (f".docx: bzip2 member of 1.1 GB ({len(docx) // 1000} KB)", file("b.docx", docx)),
        ("4 such .docx at once", four_bombs),
        (f".docx: 500,000 empty paragraphs ({len(many) // 1000} KB)", file("p.docx", many)),
        (f".odt: 21 MB of XML ({len(odt) // 1000} KB)", file("p.odt", odt)),
        (
            f".odt: 470,000 styled empty paragraphs ({len(styled) // 1000} KB)",
            file("s.odt", styled),
        ),
        (f"html: 77,000 nested <div> ({len(divs) // 1000} KB)", file("n.html", divs)),
        (
            f"html: 300 formatting elements reopened 4,000 times ({len(reopen) / 1000:.1f} KB)",
            file("r.html", reopen),
        ),
        ("headers: 64 MB in 8 KB lines", lambda: huge_headers(address)),
        ("headers: one line of 64 MB", lambda: huge_headers(address, line=True)),
        ("300 slow connections", lambda: slow_connections(address)),
        (
            "/translate of 64 × 1,000 characters, left after 1 s",
            lambda: leave_long_translate(address, pid),
        ),
    ]


def render(r: dict) -> list[str]:
    lines = [
        "## Serving: hostile requests (`scripts/bench_abuse.py`)",
        "",
        f"Model `{r['model']}`, `mt serve` with its default limits in a process of its own on "
        f"127.0.0.1. Machine: {r['cpu']}. Date: {r['date']}. Command: `{r['command']}`. The "
        f"server's idle RSS: {r['idle_mb']:.0f} MB. Peak: VmHWM above idle, reset before each "
        "class; memory back: seconds until RSS is within 20 MB of idle again (10 s at most), "
        "and what it then still holds above idle; /health: the "
        "worst of a request every 50 ms during the class. SIGTERM at the end: exit "
        f"{r['stop_exit']} in {r['stop_seconds']:.1f} s.",
        "",
        "| class | answer | seconds | peak above idle | memory back | held | worst /health |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in r["classes"]:
        failed = f" ({row['health_failed']} failed)" if row["health_failed"] else ""
        lines.append(
            f"| {row['class']} | {row['answer']} | {row['seconds']:.2f} | {row['peak_mb']:.0f} MB"
            f" | {row['memory_back_s']:.1f} s | {row['held_mb']:.0f} MB"
            f" | {row['health_worst_ms']:.0f} ms{failed} |"
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="run folder, checkpoint, or a folder from mt export")
    parser.add_argument("--log", type=Path, help="the server's stderr (default: dropped)")
    parser.add_argument("--markdown", action="store_true", help="print the docs section too")
    parser.add_argument("--only", default="", help="the classes whose name holds this text")
    args = parser.parse_args()
    with serving(args.model, "--device", "cpu", log=args.log) as address:
        pid = serving.process.pid
        idle = memory(pid, "VmRSS")
        chosen = [(name, attack) for name, attack in classes(address, pid) if args.only in name]
        rows = [measure(address, pid, name, attack) for name, attack in chosen]
    from mt.device import cpu_description

    result = {
        "model": args.model,
        "idle_mb": idle,
        "classes": rows,
        "stop_exit": serving.stopped["exit"],
        "stop_seconds": serving.stopped["seconds"],
        "cpu": cpu_description(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": shlex.join(["python", "scripts/bench_abuse.py", *sys.argv[1:]]),
    }
    if args.markdown:
        print("\n".join(render(result)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
