# bench/targets.jq: issue 31's throughput targets from one bench/both.sh run, both
# harnesses side by side. Input (jq -rn, file names matter): OUT/wrk-{mem,redis,floor,design,designredis}-R/
# results.jsonl (bench-wrk, round R) and OUT/bench.jsonl (bench/driver -jsonl, one line
# per scenario per round, in round order). Each ratio is taken within one round, then
# the median and range of the rounds' ratios are printed:
#   pass-through, memory keyed write: idemgate over the bare proxy of the same run;
#   design floor (bench/bareproxy -design: the bare proxy plus the work DESIGN.md
#   asks of every request, written plainly), over the bare proxy of the same run;
#   Redis ÷ floor: bench-wrk, (idemgate-redis / its bare proxy) over (floor / its bare
#   proxy), the two runs of round R; bench/, the two rates of the same driver round;
#   Redis ÷ design floor (Redis): the same against bench/bareproxy -design -redis (the
#   design floor keeping its claims and answers in Redis with the floor's two calls).
# bench/'s lines carry no round: the nth line of a scenario is round n, so OUT must
# hold one run (bench/both.sh refuses an OUT that holds one already).
def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def f2: . * 100 | round / 100 | tostring;
def stat: if length == 0 then "–" else "\(med | f2) (\(min | f2)–\(max | f2), \(length) rounds)" end;
def row($name; $w; $b; $target): "| \($name) | \($w | stat) | \($b | stat) | \($target) |";
[inputs | . + {file: input_filename}]
| map(select((.calibration // false) == false))
| (map(select(.harness == null and (.file | test("wrk-(mem|redis|floor|design|designredis)-[0-9]+/")))
    | . + {kind: (.file | capture("wrk-(?<k>mem|redis|floor|design|designredis)-(?<r>[0-9]+)/") | .k), round: (.file | capture("wrk-(?<k>mem|redis|floor|design|designredis)-(?<r>[0-9]+)/") | .r | tonumber)})) as $w
| (map(select(.harness == "bench")) | group_by(.scenario) | map({key: .[0].scenario, value: .}) | from_entries) as $b
| def wrk($kind; $target; $scen): [$w[] | select(.kind == $kind and .target == $target and .scenario == $scen)] | map({key: (.round | tostring), value: .}) | from_entries;
  def idem($kind; $scen): [$w[] | select(.kind == $kind and .target != "bareproxy" and .scenario == $scen)] | map({key: (.round | tostring), value: .}) | from_entries;
  def pair($x; $y; f): [$x | keys[] as $k | select($y[$k]) | [$x[$k], $y[$k]] | f];
  def bpair($x; $y; f): [range(0; [($b[$x] // []), ($b[$y] // [])] | map(length) | min) as $i | [$b[$x][$i], $b[$y][$i]] | f];
  (idem("mem"; "get")) as $ig | (wrk("mem"; "bareproxy"; "get")) as $bg
  | (idem("mem"; "post")) as $ip | (wrk("mem"; "bareproxy"; "post")) as $bp
  | (idem("redis"; "post")) as $ir | (wrk("redis"; "bareproxy"; "post")) as $br
  | (idem("design"; "get")) as $dg | (wrk("design"; "bareproxy"; "get")) as $dbg
  | (idem("design"; "post")) as $dp | (wrk("design"; "bareproxy"; "post")) as $dbp
  | (idem("floor"; "post")) as $fl | (wrk("floor"; "bareproxy"; "post")) as $bf
  | (idem("designredis"; "post")) as $drl | (wrk("designredis"; "bareproxy"; "post")) as $bdr
  | def over($fl; $bf): $ir | with_entries(select($br[.key] and $fl[.key] and $bf[.key])
      | .value = {r: ((.value.rps / $br[.key].rps) / ($fl[.key].rps / $bf[.key].rps)),
                  c: ((.value.proxy_cpu_us_per_req / $br[.key].proxy_cpu_us_per_req) / ($fl[.key].proxy_cpu_us_per_req / $bf[.key].proxy_cpu_us_per_req))});
    over($fl; $bf) as $rf | over($drl; $bdr) as $rdf
  | "| target | bench-wrk: median (min–max) | bench/: median (min–max) | target |",
    "|---|---|---|---|",
    row("pass-through, rate × bare"; pair($ig; $bg; .[0].rps / .[1].rps); bpair("idemgate pass-through GET"; "bare GET"; .[0].rps / .[1].rps); "≥ 0.9"),
    row("pass-through, CPU × bare"; pair($ig; $bg; .[0].proxy_cpu_us_per_req / .[1].proxy_cpu_us_per_req); bpair("idemgate pass-through GET"; "bare GET"; .[0].cpu_us_per_req / .[1].cpu_us_per_req); "≤ 1.2"),
    row("memory keyed write, rate × bare"; pair($ip; $bp; .[0].rps / .[1].rps); bpair("idemgate keyed first write (memory)"; "bare POST"; .[0].rps / .[1].rps); "≥ 0.85"),
    row("memory keyed write, CPU × bare"; pair($ip; $bp; .[0].proxy_cpu_us_per_req / .[1].proxy_cpu_us_per_req); bpair("idemgate keyed first write (memory)"; "bare POST"; .[0].cpu_us_per_req / .[1].cpu_us_per_req); ""),
    row("design floor GET, rate × bare"; pair($dg; $dbg; .[0].rps / .[1].rps); bpair("design floor GET"; "bare GET"; .[0].rps / .[1].rps); ""),
    row("design floor GET, CPU × bare"; pair($dg; $dbg; .[0].proxy_cpu_us_per_req / .[1].proxy_cpu_us_per_req); bpair("design floor GET"; "bare GET"; .[0].cpu_us_per_req / .[1].cpu_us_per_req); ""),
    row("design floor keyed write, rate × bare"; pair($dp; $dbp; .[0].rps / .[1].rps); bpair("design floor keyed write"; "bare POST"; .[0].rps / .[1].rps); ""),
    row("design floor keyed write, CPU × bare"; pair($dp; $dbp; .[0].proxy_cpu_us_per_req / .[1].proxy_cpu_us_per_req); bpair("design floor keyed write"; "bare POST"; .[0].cpu_us_per_req / .[1].cpu_us_per_req); ""),
    row("Redis keyed write ÷ its floor, rate"; [$rf[].r]; bpair("idemgate keyed first write (Redis)"; "floor keyed write (bare + 2 Redis round trips)"; .[0].rps / .[1].rps); "≥ 0.95"),
    row("Redis keyed write ÷ its floor, CPU"; [$rf[].c]; bpair("idemgate keyed first write (Redis)"; "floor keyed write (bare + 2 Redis round trips)"; .[0].cpu_us_per_req / .[1].cpu_us_per_req); ""),
    row("Redis keyed write ÷ design floor (Redis), rate"; [$rdf[].r]; bpair("idemgate keyed first write (Redis)"; "design floor keyed write (Redis)"; .[0].rps / .[1].rps); ""),
    row("Redis keyed write ÷ design floor (Redis), CPU"; [$rdf[].c]; bpair("idemgate keyed first write (Redis)"; "design floor keyed write (Redis)"; .[0].cpu_us_per_req / .[1].cpu_us_per_req); "")
