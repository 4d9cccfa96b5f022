#!/usr/bin/env python3
"""Budget behaviour: N sessions with SIZE-byte replies under a budget; held bytes, RSS, managed heap, log size, and exact
retries (from memory while the budget lasted, then from the log). Usage:
   budget.py APP_DLL SIZE SESSIONS BUDGET_BYTES PORT
Other options from the environment, e.g. PersistentServices__MaxBufferedReplyBytes=81920 (so that SIZE-byte replies
may be held in memory at all)."""
import hashlib, http.client, json, os, subprocess, sys, time, tempfile, shutil
dll, size, count, budget, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
logdir = tempfile.mkdtemp(prefix="ps-budget-")
env = dict(os.environ, DOTNET_NOLOGO="1", Logging__LogLevel__Default="Warning", PersistentServices__SessionMemoryBudgetBytes=budget)
p = subprocess.Popen(["dotnet", dll, "--urls", f"http://127.0.0.1:{port}", "--LogDirectory", logdir], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
c = None
def call(method, path, body=None, headers=None):
    global c
    if c is None: c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=body, headers=headers or {}); r = c.getresponse(); return r, r.read()
for _ in range(300):
    try:
        if call("GET", "/health")[0].status == 200: break
    except OSError: c = None
    time.sleep(0.2)
def rss():
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) // 1024
def health():
    return json.loads(call("GET", "/health/detail")[1])["persistentservices"]
sessions, hashes, per_reply = [], [], 0
print(f"budget {int(budget) >> 20} MiB, replies of {size} B (held in memory while the budget lasts)")
print("| sessions | held reply bytes (MiB) | health | RSS (MiB) |")
print("|---:|---:|---|---:|")
for i in range(count):
    r, d = call("POST", "/ps/sessions"); s = json.loads(d)["sessionId"]
    r, d = call("POST", "/catalog/page", json.dumps({"page": i, "size": size}).encode(), {"PS-Session": s, "PS-Seq": "1", "Content-Type": "application/json"})
    assert r.status == 200
    sessions.append(s); hashes.append(hashlib.sha256(d).digest())
    if i + 1 == 1000:
        per_reply = health()["data"]["heldReplyBytes"] / 1000
    if (i + 1) % (count // 8) == 0:
        h = health(); print(f"| {i+1} | {h['data']['heldReplyBytes'] / 2**20:.1f} | {h['status']} | {rss()} |")
lat, bad = [], 0
for i, s in enumerate(sessions):
    t = time.perf_counter()
    r, d = call("POST", "/catalog/page", json.dumps({"page": i, "size": size}).encode(), {"PS-Session": s, "PS-Seq": "1", "Content-Type": "application/json"})
    lat.append((time.perf_counter() - t) * 1000)
    if r.status != 200 or r.getheader("PS-Replayed") != "true" or hashlib.sha256(d).digest() != hashes[i]: bad += 1
held = health()["data"]["heldReplyBytes"]
k = min(count, int(round(held / per_reply))) if per_reply else 0
def pct(xs, f):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")
mem, log = lat[:k], lat[k:]
print(f"retries: {count - bad}/{count} exact; the first {k} sessions (replies in memory: held bytes / bytes per held reply) p50 {pct(mem, .5):.2f} ms "
      f"p99 {pct(mem, .99):.2f} ms; the other {count - k} (in the log) p50 {pct(log, .5):.2f} ms p99 {pct(log, .99):.2f} ms max {max(log or [0]):.2f} ms")
heap = json.loads(call("GET", "/diag/memory?collect=true")[1])["heap"]
du = subprocess.run(["du", "-sm", logdir], capture_output=True, text=True).stdout.split()[0]
print(f"end: held reply bytes {held / 2**20:.1f} MiB, RSS {rss()} MiB, managed heap after a full GC {heap >> 20} MiB, log directory {du} MiB")
p.kill(); p.wait(); shutil.rmtree(logdir, ignore_errors=True)
