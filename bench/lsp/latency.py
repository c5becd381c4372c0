#!/usr/bin/env python3
"""Time from an edit to its diagnostics in `rondo lsp` (issue 27: under 50 ms for
workflows/ds_star.rondo, under 500 ms for a generated workflow of 10,000 roles).

    python3 bench/lsp/latency.py [--bin target/release/rondo] [--edits 41]

A client speaks JSON-RPC over the server's standard input and output, as an editor does:
it opens the file, then sends edits one at a time, alternately adding a line with an
error (an exit whose condition reads a role that does not exist) and taking it away, and
times each from the moment the `didChange` is written to the moment the diagnostics of
that version arrive. Each edit is checked: an error after the first kind, none after the
second. Prints the median, the 90th percentile and the range of each workload, and the
machine's load average (the machine is shared: the spread says how far to trust a
median). The 10,000-role file comes from bench/check/gen.py, in a temporary folder with
bench/check/prompts.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Client:
    def __init__(self, binary, root):
        self.p = subprocess.Popen(
            [binary, "lsp", "--offline"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
        )
        self.next_id = 0
        self.request("initialize", {"processId": None, "rootUri": "file://" + root, "capabilities": {}})
        self.notify("initialized", {})

    def send(self, message):
        body = json.dumps(message).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.p.stdin.flush()

    def receive(self):
        length = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.p.stdout.read(length))

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            m = self.receive()
            if m.get("id") == self.next_id and "method" not in m:
                return m.get("result")

    def diagnostics(self, uri, version):
        while True:
            m = self.receive()
            p = m.get("params") or {}
            if m.get("method") == "textDocument/publishDiagnostics" and p.get("uri") == uri and p.get("version") == version:
                return p["diagnostics"]

    def close(self):
        self.request("shutdown", None)
        self.notify("exit", None)
        self.p.wait(timeout=30)


def measure(binary, path, edits):
    text = open(path, encoding="utf-8").read()
    uri = "file://" + path
    client = Client(binary, os.path.dirname(path))
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "rondo", "version": 1, "text": text}})
    first = client.diagnostics(uri, 1)
    assert first == [], f"{path} is not clean: {first[:1]}"
    lines = text.count("\n")
    end = {"line": lines, "character": 0} if text.endswith("\n") else None
    assert end, "the file ends with a newline"
    bad = "exit broken when no_such_role.ok\n"
    times = []
    for i in range(edits):
        version = i + 2
        if i % 2 == 0:
            change = {"range": {"start": end, "end": end}, "text": bad}
        else:
            change = {"range": {"start": end, "end": {"line": lines + 1, "character": 0}}, "text": ""}
        start = time.perf_counter()
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]})
        diags = client.diagnostics(uri, version)
        times.append((time.perf_counter() - start) * 1000)
        if i % 2 == 0:
            assert any(d.get("code") == "rondo::expr::unknown_name" for d in diags), diags[:2]
        else:
            assert diags == [], diags[:2]
    client.close()
    return times


def report(name, times, target):
    times_sorted = sorted(times)
    p90 = times_sorted[max(0, int(round(0.9 * len(times))) - 1)]
    median = statistics.median(times)
    verdict = "met" if median < target else "NOT met"
    print(f"| {name} | {len(times)} | {median:.1f} | {p90:.1f} | {times_sorted[0]:.1f}–{times_sorted[-1]:.1f} | < {target} ({verdict}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.environ.get("RONDO_BIN", os.path.join(ROOT, "target/release/rondo")))
    parser.add_argument("--edits", type=int, default=41)
    parser.add_argument("--big-edits", type=int, default=21)
    parser.add_argument("--roles", type=int, default=10_000)
    args = parser.parse_args()
    args.bin = os.path.abspath(args.bin)
    if not os.path.exists(args.bin):
        sys.exit(f"no binary at {args.bin}: cargo build --release --bin rondo, or --bin PATH")
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, {os.cpu_count()} cores")
    print("| workload | edits | median ms | p90 ms | min–max ms | target ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        # ds_star in a copy laid out as in the repository (its prompts and script beside it).
        os.makedirs(os.path.join(tmp, "ds", "workflows"))
        shutil.copy(os.path.join(ROOT, "workflows/ds_star.rondo"), os.path.join(tmp, "ds/workflows"))
        shutil.copytree(os.path.join(ROOT, "workflows/scripts"), os.path.join(tmp, "ds/workflows/scripts"))
        shutil.copytree(os.path.join(ROOT, "prompts/ds_star"), os.path.join(tmp, "ds/prompts/ds_star"))
        report("workflows/ds_star.rondo", measure(args.bin, os.path.join(tmp, "ds/workflows/ds_star.rondo"), args.edits), 50)
        big_dir = os.path.join(tmp, "big")
        shutil.copytree(os.path.join(ROOT, "bench/check/prompts"), os.path.join(big_dir, "prompts"))
        big = os.path.join(big_dir, "big.rondo")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench/check/gen.py"), "--roles", str(args.roles), "--out", big],
                       check=True, stdout=subprocess.DEVNULL)
        size = os.path.getsize(big)
        report(f"generated {args.roles:,} roles ({size / 1e6:.1f} MB)", measure(args.bin, big, args.big_edits), 500)
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
