#!/bin/bash
# Tests/Benchmarks/tenths.sh LEDGER LINES_FILE [ROUNDS] [WORK_DIR]: issue 9's slope through the binary,
# paired against the machine's drift (docs/benchmarks.md, "Session 29"). The history's first tenth is
# submitted into a fresh store and its last tenth into a copy of a store holding the first nine tenths,
# one after the other, ROUNDS times (default 5); each round prints both runs' wall, user and system
# seconds and the rate ratio last ÷ first (the first's wall over the last's), and the end the median ratio.
# With CONTROL=GEN_HISTORY_PY (make bench-tenths sets it), each round also submits the first tenth into a
# copy of a store holding as many lines of another stream (gen_history.py --stream 1: disjoint accounts
# and transactions), and prints that run's rate ratio against the fresh store's: the part of the slope
# that the store's size alone makes, the first tenth's mix of lines being the same in both runs.
# Figures only, nothing is asserted.
set -euo pipefail
ledger=$1 lines=$2 rounds=${3:-5} work=${4:-.build/bench/tenths}
app=(--bundle-id com.example.myrecipes --environment Production --app-apple-id 1234567890)
mkdir -p "$work"
total=$(wc -l < "$lines")
tenth=$((total / 10))
head -n "$tenth" "$lines" > "$work/first.jsonl"
head -n $((total - tenth)) "$lines" > "$work/nine.jsonl"
tail -n "$tenth" "$lines" > "$work/last.jsonl"
rm -rf "$work/nine"
"$ledger" init "${app[@]}" --store "$work/nine" > /dev/null 2>&1
echo "tenths: building the store of the first nine tenths ($((total - tenth)) lines)" >&2
"$ledger" submit --trust-decoded --store "$work/nine" < "$work/nine.jsonl" > /dev/null
control=${CONTROL:-}
if [ -n "$control" ]; then
    echo "tenths: building the control store ($((total - tenth)) lines of stream 1)" >&2
    rm -rf "$work/other"
    "$ledger" init "${app[@]}" --store "$work/other" > /dev/null 2>&1
    python3 "$control" $((total - tenth)) --stream 1 | "$ledger" submit --trust-decoded --store "$work/other" > /dev/null
fi
timed() { { /usr/bin/time -f "%e %U %S" "$ledger" submit --trust-decoded --store "$1" < "$2" > /dev/null; } 2>&1 | tail -n 1; }
ratios=()
controls=()
for round in $(seq 1 "$rounds"); do
    rm -rf "$work/first" "$work/last"
    cp -r "$work/nine" "$work/last"
    "$ledger" init "${app[@]}" --store "$work/first" > /dev/null 2>&1
    sync
    read -r fw fu fs < <(timed "$work/first" "$work/first.jsonl")
    sync
    read -r lw lu ls < <(timed "$work/last" "$work/last.jsonl")
    ratio=$(python3 -c "print(round($fw / $lw, 3))")
    ratios+=("$ratio")
    echo "round $round: first tenth ${fw} s (user $fu, sys $fs), last tenth ${lw} s (user $lu, sys $ls), last/first rate $ratio"
    if [ -n "$control" ]; then
        rm -rf "$work/control"
        cp -r "$work/other" "$work/control"
        sync
        read -r cw cu cs < <(timed "$work/control" "$work/first.jsonl")
        controls+=("$(python3 -c "print(round($fw / $cw, 3))")")
        echo "round $round: first tenth into the control store ${cw} s (user $cu, sys $cs), rate against the fresh store's ${controls[-1]}"
    fi
done
python3 -c "import statistics, sys; print('median last/first rate', statistics.median(float(r) for r in sys.argv[1:]))" "${ratios[@]}"
if [ -n "$control" ]; then
    python3 -c "import statistics, sys; print('median control/fresh rate (size alone)', statistics.median(float(r) for r in sys.argv[1:]))" "${controls[@]}"
fi
