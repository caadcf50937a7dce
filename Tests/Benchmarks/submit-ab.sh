#!/usr/bin/env bash
# `ledger submit` before and after (docs/benchmarks.md, "`ledger submit` end to end"): by default the
# sequential path (`--sequential`) against the pipelined one of the same binary; with BEFORE=BINARY,
# that binary (e.g. a build of an older commit) against LEDGER. PAIRS alternating runs (before,
# after, before, …) of the same input into fresh stores, each timed by /usr/bin/time (wall, user and system seconds, peak resident set) with
# the process's anonymous resident memory (heap and stacks, not the store's mapped file pages)
# sampled every 50 ms, and the CPU time of its busiest thread (sampled likewise: the critical path
# of a pipeline, which bounds its rate on idle cores whatever else the machine runs). The two runs of
# a pair must answer byte for byte alike (cmp). Prints one row per run and the median after/before
# ratios of wall time, CPU time and busiest-thread CPU time; figures only, nothing is asserted.
#
#   bash Tests/Benchmarks/submit-ab.sh LINES.jsonl [trusted|signed]
#   PAIRS=3  LEDGER=.build/release/ledger  BEFORE=  (a binary; default: LEDGER --sequential)
set -euo pipefail
cd "$(dirname "$0")/../.."
input=$1
mode=${2:-trusted}
PAIRS=${PAIRS:-3}
LEDGER=${LEDGER:-.build/release/ledger}
BEFORE=${BEFORE:-}
if [ -n "$BEFORE" ]; then before=("$BEFORE"); else before=("$LEDGER" --sequential); fi
work=.build/bench/ab
mkdir -p "$work"
init=(init --bundle-id com.example.myrecipes --environment Production --app-apple-id 1234567890)
flags=()
if [ "$mode" = signed ]; then
    init+=(--root-certificate Tests/AppleSignedDataTests/Vectors/certs/testCA.der)
else
    flags+=(--trust-decoded)
fi
lines=$(grep -c . "$input")
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $mode, $lines lines of $input; before: ${before[*]}; after: $LEDGER"
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s %9s %9s %9s %12s %10s %10s %10s\n' run wall_s user_s sys_s lines/s peak_rss peak_anon busiest_s
run() {  # run NAME BINARY [FLAGS…]
    local name=$1 binary=$2
    shift 2
    rm -rf "$work/store"
    "$binary" "${init[@]}" --store "$work/store" >/dev/null
    /usr/bin/time -o "$work/time" -f '%e %U %S %M' "$binary" submit "${flags[@]}" "$@" --store "$work/store" \
        <"$input" >"$work/answers-$name" &
    local timer=$! pid="" anon=0 sample busiest=0
    declare -A ticks=()
    while kill -0 "$timer" 2>/dev/null; do
        [ -n "$pid" ] || pid=$(pgrep -P "$timer" | head -1 || true)
        if [ -n "$pid" ]; then
            sample=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
            [ -n "$sample" ] && [ "$sample" -gt "$anon" ] && anon=$sample
            # CPU time of each thread so far (utime + stime, in clock ticks).
            while read -r tid used; do ticks[$tid]=$used; done < <(cat /proc/"$pid"/task/*/stat 2>/dev/null |
                sed 's/^\([0-9]*\) (.*) /\1 /' | awk '{ print $1, $13 + $14 }')
        fi
        sleep 0.05
    done
    wait "$timer"
    for used in "${ticks[@]}"; do [ "$used" -gt "$busiest" ] && busiest=$used; done
    read -r wall user sys rss <"$work/time"
    busiest=$(echo "$busiest / $(getconf CLK_TCK)" | bc -l)
    printf '%-11s %9s %9s %9s %12.0f %8.1f M %8.1f M %10.2f\n' "$name" "$wall" "$user" "$sys" "$(echo "$lines / $wall" | bc -l)" \
        "$(echo "$rss / 1024" | bc -l)" "$(echo "$anon / 1024" | bc -l)" "$busiest"
    echo "$name $wall $user $sys $busiest" >>"$work/walls"
}
: >"$work/walls"
for pair in $(seq "$PAIRS"); do
    run before "${before[@]}"
    run after "$LEDGER"
    cmp -s "$work/answers-before" "$work/answers-after" || { echo "pair $pair: the answers differ" >&2; exit 1; }
done
python3 - "$work/walls" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
for label, column in (("wall", lambda r: float(r[1])), ("cpu", lambda r: float(r[2]) + float(r[3])),
                      ("busiest thread's cpu", lambda r: float(r[4]))):
    before = [column(r) for r in rows if r[0] == "before"]
    after = [column(r) for r in rows if r[0] == "after"]
    ratios = [a / b for b, a in zip(before, after)]
    print(f"{label}: median before {statistics.median(before):.2f} s, after {statistics.median(after):.2f} s; "
          f"after/before per pair {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")
print("answers identical in every pair")
PY
