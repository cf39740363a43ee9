-- wrk script posting one KServe v2 binary-tensor inference request, the body kiln loadgen
-- sends (bench/serve/wrk_vs_loadgen.py writes it). Non-200 answers are counted by wrk itself
-- ("Non-2xx or 3xx responses"); this script also checks each 200 carries the binary header.
--
-- usage: wrk -t1 -c4 -d10s -s bench/serve/wrk_infer.lua http://HOST:PORT -- MODEL BODY_FILE HEADER_LENGTH

local request_text
local bad = 0

function init(args)
  local model, body_file, header_length = args[1], args[2], args[3]
  local f = assert(io.open(body_file, "rb"))
  local body = f:read("*a")
  f:close()
  request_text = wrk.format("POST", "/v2/models/" .. model .. "/infer", {
    ["Content-Type"] = "application/octet-stream",
    ["Inference-Header-Content-Length"] = header_length,
  }, body)
end

function request()
  return request_text
end

function response(status, headers, body)
  if status == 200 and headers["Inference-Header-Content-Length"] == nil then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  io.write(string.format("wrk: %d requests in %.2f s, %.1f requests/s, p50 %.1f ms, p99 %.1f ms, errors %d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status +
    summary.errors.timeout))
end
