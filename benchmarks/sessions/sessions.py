#!/usr/bin/env python3
"""Memory per session by reply size, and exact retries before and after kill -9 (docs/capacity.md). Usage:
   sessions.py APP_DLL SIZE_BYTES SESSIONS [--port P] [--no-restart] [--env K=V ...]"""
import hashlib, http.client, json, os, signal, subprocess, sys, time, statistics, shutil, tempfile

def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

dll, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
port = int(arg("--port", "5391"))
logdir = tempfile.mkdtemp(prefix="ps-sessions-log-")
extra = [a for i, a in enumerate(sys.argv) if i > 0 and sys.argv[i - 1] == "--env"]

def start():
    env = dict(os.environ, DOTNET_NOLOGO="1", Logging__LogLevel__Default="Warning")
    for kv in extra:
        k, v = kv.split("=", 1); env[k] = v
    p = subprocess.Popen(["dotnet", dll, "--urls", f"http://127.0.0.1:{port}", "--LogDirectory", logdir], env=env,
                         stdout=open(logdir + ".out", "a"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5); c.request("GET", "/health"); r = c.getresponse(); r.read()
            if r.status == 200: return p
        except OSError: pass
        time.sleep(0.1)
    raise SystemExit("server did not start")

def rss(p):
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) * 1024

conn = None
def call(method, path, body=None, headers=None):
    global conn
    for attempt in range(3):
        try:
            if conn is None: conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse(); data = r.read()
            return r, data
        except (OSError, http.client.HTTPException):
            conn = None
            if attempt == 2: raise

def diag(collect=False):
    return json.loads(call("GET", "/diag/memory" + ("?collect=true" if collect else ""))[1])

def start_session():
    r, data = call("POST", "/ps/sessions"); assert r.status == 201, (r.status, data)
    return json.loads(data)["sessionId"]

def page(session, seq, n, bytes_=None):
    body = json.dumps({"page": n, "size": bytes_ or size}).encode()
    t = time.perf_counter()
    r, data = call("POST", "/catalog/page", body, {"PS-Session": session, "PS-Seq": str(seq), "Content-Type": "application/json"})
    return r, data, time.perf_counter() - t

p = start()
# warm-up: one session, 200 requests of 256 KiB (fills the log's 32 MiB page buffer), then 50 of the measured size
w = start_session()
for i in range(1, 201): page(w, i, 10_000 + i, 262144)
for i in range(201, 251): page(w, i, 10_000 + i)
time.sleep(1)
heap_before = diag(collect=True)["heap"]
time.sleep(1)
before = rss(p)
sessions, hashes = [], []
t0 = time.time()
for i in range(count):
    s = start_session()
    r, data, _ = page(s, 1, i)
    assert r.status == 200 and len(data) == size, (r.status, len(data))
    sessions.append(s); hashes.append(hashlib.sha256(data).digest())
elapsed = time.time() - t0
time.sleep(1)
after, heap_after = rss(p), diag()["heap"]
heap_collected = diag(collect=True)["heap"]
after_collect = rss(p)
print(f"reply {size} B, {count} sessions in {elapsed:.1f} s: RSS {before>>20} -> {after>>20} MiB = {(after-before)/count/1024:.1f} KiB/session "
      f"(after a full GC: {(after_collect-before)/count/1024:.1f} KiB/session); managed heap {heap_before>>20} -> {heap_after>>20} MiB, "
      f"after a full GC {heap_collected>>20} MiB = {(heap_collected-heap_before)/count/1024:.2f} KiB/session (both after a full GC)")

def retry_all(label):
    lat, bad = [], 0
    for i, s in enumerate(sessions):
        r, data, t = page(s, 1, i)
        lat.append(t)
        if r.status != 200 or r.getheader("PS-Replayed") != "true" or hashlib.sha256(data).digest() != hashes[i]: bad += 1
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1000
    print(f"{label}: {len(sessions) - bad}/{len(sessions)} retries exact; latency p50 {q(0.5):.2f} ms, p99 {q(0.99):.2f} ms, max {lat[-1]*1000:.2f} ms")
    return bad

bad = retry_all("retry (live)")
if "--no-restart" not in sys.argv:
    os.kill(p.pid, signal.SIGKILL); p.wait(); conn = None
    t = time.time(); p = start(); ready = time.time() - t
    time.sleep(3)
    r_before = rss(p)
    bad += retry_all(f"retry after kill -9 and restart (ready in {ready:.1f} s)")
    print(f"after restart: RSS {r_before>>20} MiB before the retries, {rss(p)>>20} MiB after; managed heap after a full GC {diag(collect=True)['heap']>>20} MiB")
du = subprocess.run(["du", "-sm", logdir], capture_output=True, text=True).stdout.split()[0]
print(f"log directory: {du} MiB")
p.kill(); p.wait()
shutil.rmtree(logdir, ignore_errors=True)
sys.exit(1 if bad else 0)
