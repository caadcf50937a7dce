#!/usr/bin/env bash
# The PostgreSQL benchmark (`make bench-postgres`, docs/benchmarks.md): decisions/s of the
# gen_history workload with 1, 2 and 4 `ledger submit` writer processes on one store, PostgreSQL
# (a throwaway local cluster, durable: fsync on) beside LMDB; then rebuild and verify rate and
# bytes per line of each. Prints one table (with the load average at each figure: the machine may be
# shared) and the CPU seconds spent: the writers' (user + system of the `ledger submit` processes) and,
# for PostgreSQL, the server's (every postgres process of the cluster: the backends the postmaster
# reaped, plus the background processes' own time), each also per 1,000 decisions; figures only,
# nothing is asserted.
#
#   LINES=200000   lines of ../shared/tools/gen_history.py (generated once into .build/bench)
#   WRITERS="1 2 4"
#   ENGINES="lmdb postgres"
#   LEDGER=.build/release/ledger
#   COMPARE=PATH   a second ledger binary (e.g. one built from an older commit): each figure is measured
#                  for LEDGER then COMPARE, PAIRS times in alternation, on the same cluster; compare ratios
#   PAIRS=1
set -euo pipefail
cd "$(dirname "$0")/../.."
LINES=${LINES:-200000}
WRITERS=${WRITERS:-1 2 4}
ENGINES=${ENGINES:-lmdb postgres}
LEDGER=${LEDGER:-.build/release/ledger}
COMPARE=${COMPARE:-}
PAIRS=${PAIRS:-1}
GEN_HISTORY=${GEN_HISTORY:-../shared/tools/gen_history.py}
work=.build/bench/postgres
mkdir -p .build/bench "$work"
lines=.build/bench/lines-$LINES.jsonl
test -s "$lines" || python3 "$GEN_HISTORY" "$LINES" >"$lines"

# Each writer takes the lines of some lineages (an app server handles its own users' requests), in order.
split_lines() {
    python3 - "$lines" "$1" "$work/part" <<'PY'
import json, sys, zlib
path, n, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
outs = [open(f"{prefix}-{n}-{i}.jsonl", "w") for i in range(n)]
for line in open(path):
    o = json.loads(line)
    t = o.get("transaction") or (o.get("notification") or {}).get("data", {}).get("transaction") or {}
    key = t.get("originalTransactionId") or o.get("account") or ""
    outs[zlib.crc32(key.encode()) % n].write(line)
PY
}

# A throwaway cluster, durable like production (fsync and synchronous_commit on), Unix socket only.
bindir=$(pg_config --bindir)
cluster=$(mktemp -d /tmp/ledger-bench-pg-XXXXXX)
as_server() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$cluster"
cleanup() { as_server "$bindir/pg_ctl" -D "$cluster/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$cluster"; }
trap cleanup EXIT
as_server "$bindir/initdb" -D "$cluster/data" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null
as_server "$bindir/pg_ctl" -D "$cluster/data" -l "$cluster/server.log" -w -o \
    "-k $cluster -c listen_addresses='' -c shared_buffers=1GB -c max_wal_size=8GB -c checkpoint_timeout=30min" start >/dev/null
socket=$(python3 -c "import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1], safe=''))" "$cluster")
database=0

config=(--bundle-id com.example.myrecipes --environment Production --app-apple-id 1234567890)
now() { date +%s.%N; }
rate() { python3 -c "print(round($1 / ($3 - $2)))"; }
ticks=$(getconf CLK_TCK)
# CPU seconds of the cluster so far: the postmaster's own and its reaped children's (the backends of
# finished sessions), plus each live child's (checkpointer, WAL writer, autovacuum, ...).
server_cpu() {
    local postmaster total=0 pid fields
    postmaster=$(head -1 "$cluster/data/postmaster.pid")
    read -ra fields < <(sed 's/^.*) //' "/proc/$postmaster/stat")
    total=$((fields[11] + fields[12] + fields[13] + fields[14]))
    for pid in $(pgrep -P "$postmaster"); do
        read -ra fields < <(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        total=$((total + fields[11] + fields[12]))
    done
    python3 -c "print($total / $ticks)"
}

printf '%-10s %-8s %-8s %12s %14s %12s %12s %18s   %s\n' engine writers binary seconds decisions/s writer-cpu server-cpu "cpu-ms/1k (w + s)" load
for engine in $ENGINES; do
    for n in $WRITERS; do
        split_lines "$n"
        for pair in $(seq "$PAIRS"); do
            for binary in "$LEDGER" $COMPARE; do
                label=$([ "$binary" = "$LEDGER" ] && echo LEDGER || echo COMPARE)
                if [ "$engine" = postgres ]; then
                    database=$((database + 1))
                    psql -h "$cluster" -U postgres -d postgres -qXc "CREATE DATABASE bench$database" >/dev/null
                    rm -rf "$work/keys-$database"
                    store=(--store "postgresql:///bench$database?host=$socket&user=postgres" --keys "$work/keys-$database")
                else
                    rm -rf "$work/lmdb-$n"
                    store=(--store "$work/lmdb-$n")
                fi
                "$binary" init "${config[@]}" "${store[@]}" >/dev/null
                server_before=$([ "$engine" = postgres ] && server_cpu || echo 0)
                start=$(now)
                for i in $(seq 0 $((n - 1))); do
                    /usr/bin/time -f '%U %S' -o "$work/cpu-$i" \
                        "$binary" submit --trust-decoded "${store[@]}" <"$work/part-$n-$i.jsonl" >"$work/answers-$engine-$n-$i.jsonl" &
                done
                wait
                end=$(now)
                sleep 0.2  # the postmaster reaps the writers' backends
                server=$([ "$engine" = postgres ] && python3 -c "print(round($(server_cpu) - $server_before, 2))" || echo -)
                writers=$(cat "$work"/cpu-* | awk '{ s += $1 + $2 } END { printf "%.2f", s }')
                rm -f "$work"/cpu-*
                answered=$(cat "$work"/answers-"$engine"-"$n"-*.jsonl | wc -l)
                per=$(python3 -c "w, s, n = $writers, '$server', $answered; print(f'{1e6 * w / n:.0f} + ' + (f'{1e6 * float(s) / n:.0f}' if s != '-' else '-'))")
                printf '%-10s %-8s %-8s %12.2f %14s %12s %12s %18s   %s\n' "$engine" "$n" "$label" "$(python3 -c "print($end - $start)")" \
                    "$(rate "$answered" "$start" "$end")" "$writers" "$server" "$per" "$(cut -d' ' -f1-3 /proc/loadavg)"
                last_store=("${store[@]}")
            done
        done
    done
    records=$("$LEDGER" stats "${last_store[@]}" | python3 -c "import json,sys; print(json.load(sys.stdin)['records'])")
    bytes=$("$LEDGER" stats "${last_store[@]}" | python3 -c "import json,sys; o=json.load(sys.stdin); print(o.get('databaseBytes') or o['dataFileBytes'])")
    start=$(now); "$LEDGER" rebuild --check "${last_store[@]}" >/dev/null; end=$(now)
    echo "$engine: rebuild --check $(rate "$records" "$start" "$end") records/s; $((bytes / LINES)) bytes per line ($bytes bytes, $records records)"
    start=$(now); "$LEDGER" verify "${last_store[@]}" >/dev/null; end=$(now)
    echo "$engine: verify $(rate "$records" "$start" "$end") records/s"
done
