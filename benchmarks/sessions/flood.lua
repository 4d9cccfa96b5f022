-- One client flooding POST /ps/sessions: counts 201 and 429 answers.
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) created = 0; refused = 0; other = 0 end
function request() return wrk.format("POST", "/ps/sessions") end
function response(status, headers, body)
  if status == 201 then created = created + 1 elseif status == 429 then refused = refused + 1 else other = other + 1 end
end
function done(summary, latency, requests)
  local c, r, o = 0, 0, 0
  for _, t in ipairs(threads) do c = c + t:get("created"); r = r + t:get("refused"); o = o + t:get("other") end
  io.write(string.format("FLOOD requests=%d seconds=%.1f created=%d refused=%d other=%d\n", summary.requests, summary.duration / 1e6, c, r, o))
end
