#!/usr/bin/env python3
"""Load client for bench/serve: N POST /ask from C concurrent clients (stdlib only).

Prints one JSON line: total seconds, ideal seconds, ratio, latency p50/p99, errors.
"""
import argparse, http.client, json, statistics, threading, time

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--requests", type=int, default=1000)
p.add_argument("--clients", type=int, default=100)
p.add_argument("--latency-ms", type=float, default=100)
p.add_argument("--server-concurrency", type=int, default=100)
a = p.parse_args()

lat, errors, lock = [], [], threading.Lock()
counter = iter(range(a.requests))

def client():
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
    while True:
        with lock:
            i = next(counter, None)
        if i is None:
            return
        body = json.dumps({"question": f"q{i}"})
        t = time.perf_counter()
        try:
            conn.request("POST", "/ask", body, {"content-type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            ok = r.status == 200 and json.loads(data).get("exit") == "done"
        except Exception as e:  # a broken connection is an error, and a new one is opened
            ok, data = False, str(e).encode()
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
        dt = time.perf_counter() - t
        with lock:
            lat.append(dt)
            if not ok:
                errors.append(data[:200].decode(errors="replace"))

start = time.perf_counter()
threads = [threading.Thread(target=client) for _ in range(a.clients)]
for t in threads: t.start()
for t in threads: t.join()
total = time.perf_counter() - start
ideal = a.requests * a.latency_ms / 1000 / min(a.clients, a.server_concurrency)
lat.sort()
print(json.dumps({
    "requests": a.requests, "clients": a.clients, "total_s": round(total, 3),
    "ideal_s": ideal, "ratio": round(total / ideal, 3),
    "p50_ms": round(statistics.median(lat) * 1000, 1),
    "p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1000, 1),
    "errors": len(errors), "first_error": errors[0] if errors else None,
}))
