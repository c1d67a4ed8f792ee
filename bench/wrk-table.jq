# bench/wrk.sh table FILE...: a Markdown table of bench-wrk results.jsonl lines and
# bench/driver -jsonl lines, per file (one configuration each) and scenario.
def med: sort | .[(length / 2 | floor)];
def f2: . * 100 | round / 100 | tostring;
def rng: "\(min | f2)–\(max | f2)";
# Each line is compared with the bare proxy's line of the same input file and
# the same index (bench-wrk's results.jsonl holds its own bare runs; bench/'s
# jsonl one line per scenario per round), and shown under its file's label:
# the file's name, after its directory's with a round's -N cut
# (both.sh's wrk-redis-3/results.jsonl: wrk-redis/results), so that the
# rounds of one configuration share a row.
[inputs | . + {path: input_filename, file: (input_filename | split("/")
    | (if length > 1 then (.[-2] | sub("-[0-9]+$"; "")) + "/" else "" end) + (.[-1] | sub("\\.jsonl$"; "")))}]
| map(select(.kind == null and (.calibration // false) == false) |
    if .harness == "bench" then
      {file, path, name: .scenario, base: (if (.scenario | test("GET")) then "bare GET" else "bare POST" end), rps, cpu: .cpu_us_per_req, load: .loadavg}
    else
      {file, path, name: (.target + " " + .scenario), base: ("bareproxy " + .scenario), rps, cpu: .proxy_cpu_us_per_req, load: .loadavg}
    end)
| group_by(.file) | map(
    group_by([.path, .name]) | map(to_entries | map(.value + {i: .key})) | flatten
    | . as $all
    | (map({key: "\(.path)#\(.name)#\(.i)", value: .}) | from_entries) as $by
    | group_by(.name) | map(
        . as $rs | $rs[0] as $r
        | [ $rs[] | $by["\(.path)#\(.base)#\(.i)"] as $b | select($b) | {r: (.rps / $b.rps), c: (if $b.cpu > 0 then .cpu / $b.cpu else null end)} ] as $q
        | "| \($r.file) | \($r.name) | \($rs | length) | \($rs | map(.rps) | med | round) | \($rs | map(.rps) | min | round)–\($rs | map(.rps) | max | round) | \(if ($q|length) > 0 then ($q | map(.r) | med | f2) + " (" + ($q | map(.r) | rng) + ")" else "" end) | \($rs | map(.cpu // 0) | med | round) | \($rs | map(.cpu // 0) | min | round)–\($rs | map(.cpu // 0) | max | round) | \(if ($q|length) > 0 and $q[0].c then ($q | map(.c) | med | f2) + " (" + ($q | map(.c) | rng) + ")" else "" end) | \($rs | map(.load | split(" ")[0]) | join(" ")) |")
  ) | flatten
| ("| run | scenario | n | req/s | min–max | × bare, per round: median (min–max) | CPU µs/req | min–max | CPU × bare, per round | load (1 min) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"), .[]
