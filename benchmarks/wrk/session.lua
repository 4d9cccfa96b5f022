-- wrk script: one connection per wrk thread (run with -t N -c N), each thread its own PersistentServices session
-- (read from the file in PS_SESSIONS, one id per line) and its own PS-Seq counter, so every request is the session's
-- next one. PS_PATH picks the endpoint; a plain endpoint ignores the headers, so both kinds send the same request.
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
end

function init(args)
  local n = 0
  for line in io.lines(os.getenv("PS_SESSIONS")) do
    n = n + 1
    if n == id then session = line end
  end
  -- wrk calls the first thread's request() once to verify the script and drops that request (script_verify_request in
  -- wrk.c); every other thread's first request is sent. Either way the first one sent is 1.
  if id == 1 then seq = -1 else seq = 0 end
  path = os.getenv("PS_PATH") or "/persistent"
end

function request()
  seq = seq + 1
  return wrk.format("POST", path, { ["Content-Type"] = "application/json", ["PS-Session"] = session, ["PS-Seq"] = tostring(seq) }, '{"n":1}')
end

function done(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT requests=%d seconds=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, errors))
end
