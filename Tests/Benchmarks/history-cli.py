#!/usr/bin/env python3
"""The history workload through the `ledger` binary alone (`make bench-format1`, docs/benchmarks.md).

usage: history-cli.py LINES_FILE LEDGER[=LABEL]... [--work DIR] [--chunks N] [--queries N]

For each binary, in the order given, in one run on the same lines: a fresh store (the defaults of
../shared/tools/gen_history.py), then
  - `ledger submit --trust-decoded` of the lines in N equal chunks (default 10), one process per chunk:
    lines/s of each (process start and open included), and the last chunk's rate over the first's;
  - data.mdb bytes per line;
  - `ledger rebuild` and `ledger verify`: seconds, events/s and records/s where the report gives
    them, peak anonymous memory (RssAnon sampled from /proc every 2 ms: heap and stacks) and peak
    resident memory (VmHWM, which also counts the pages of data.mdb the map touched);
  - `account --uid U --at T` and `binding --original-transaction-id ID --at T`, each the median of
    --queries processes (default 9, over 3 accounts and 3 lineages of the history), T cut at 90% of
    the history (the time each format's tools cut on: format 1 the lines' `at`, format 2 `recordedAt`).
Works with the format-1 binary (the parent of 7d3dd82) and the format-2 one, whose CLI agrees on
these commands. Prints one JSON object per binary; figures only, nothing is asserted.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("lines")
ap.add_argument("ledgers", nargs="+")
ap.add_argument("--work", default=".build/bench/cli")
ap.add_argument("--chunks", type=int, default=10)
ap.add_argument("--queries", type=int, default=9)
a = ap.parse_args()

with open(a.lines, "rb") as f:
    lines = [line for line in f if line.strip()]
n = len(lines)
bounds = [n * i // a.chunks for i in range(a.chunks + 1)]
cut_line = bounds[-2]  # the first line of the last chunk: 90% with 10 chunks


def field(line, name):
    o = json.loads(line)
    if name == "account":
        return o.get("account")
    t = o.get("transaction") or (o.get("notification") or {}).get("data", {}).get("transaction") or {}
    return t.get("originalTransactionId")


def sample(name):
    found = []
    for index in (0, cut_line // 2, cut_line - 1):
        for line in lines[index:]:
            value = field(line, name)
            if value and value not in found:
                found.append(value)
                break
    return found


uids, lineages = sample("account"), sample("lineage")
cut_at = max(json.loads(line)["at"] for line in lines[:cut_line])


def measure(argv, stdin=None):
    """Seconds, peak RssAnon and VmHWM (MiB), exit status and stdout of a process."""
    out_file, err_file = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # a pipe left unread would stop the child
    start = time.monotonic()
    process = subprocess.Popen(argv, stdin=stdin, stdout=out_file, stderr=err_file)
    peak = {"RssAnon:": 0, "VmHWM:": 0}
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                for row in status:
                    parts = row.split()
                    if parts and parts[0] in peak:
                        peak[parts[0]] = max(peak[parts[0]], int(parts[1]))
        except OSError:
            pass
        time.sleep(0.002)
    seconds = time.monotonic() - start
    out_file.seek(0)
    err_file.seek(0)
    out, err = out_file.read(), err_file.read()
    return seconds, peak["RssAnon:"] / 1024, peak["VmHWM:"] / 1024, process.returncode, out, err


def run(ledger, label):
    store = os.path.join(a.work, label)
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([ledger, "init", "--bundle-id", "com.example.myrecipes", "--environment", "Production",
                    "--app-apple-id", "1234567890", "--store", store], check=True, stdout=subprocess.DEVNULL)
    rates, cut_recorded_at = [], None
    for chunk in range(a.chunks):
        part = os.path.join(a.work, f"{label}-chunk.jsonl")
        with open(part, "wb") as f:
            f.writelines(lines[bounds[chunk]:bounds[chunk + 1]])
        if chunk == a.chunks - 1:
            cut_recorded_at = int(time.time() * 1000)  # format 2's recordedAt of the first line of the last chunk
        with open(part, "rb") as stdin:
            seconds, _, _, status, _, err = measure([ledger, "submit", "--trust-decoded", "--store", store], stdin=stdin)
        if status != 0:
            sys.exit(f"{label}: submit exited {status}: {err.decode()[-500:]}")
        rates.append(round((bounds[chunk + 1] - bounds[chunk]) / seconds))
        print(f"{label}: chunk {chunk + 1}/{a.chunks}: {rates[-1]} lines/s", file=sys.stderr)
    figures = {"ledger": ledger, "label": label, "lines": n, "submitLinesPerSecondByChunk": rates,
               "lastOverFirst": round(rates[-1] / rates[0], 2), "dataFileBytes": os.path.getsize(os.path.join(store, "data.mdb"))}
    figures["bytesPerLine"] = figures["dataFileBytes"] // n
    for command in ("rebuild", "verify"):
        seconds, anonymous, resident, status, out, _ = measure([ledger, command, "--store", store])
        report = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
        records = report.get("records") or report.get("verifiedRecords") or 0
        events = report.get("events") or records  # format 1: one record per event
        figures[command] = {"seconds": round(seconds, 2), "exitStatus": status, "records": records, "events": events,
                            "recordsPerSecond": round(records / seconds), "eventsPerSecond": round(events / seconds),
                            "peakAnonymousMiB": round(anonymous, 1), "peakResidentMiB": round(resident, 1)}
    # Format 2 cuts on recordedAt (the ledger's clock), format 1 on the records' times (the lines' `at`).
    version = subprocess.run([ledger, "upgrade", "--help"], capture_output=True).returncode
    at = cut_recorded_at if version == 0 else cut_at
    figures["queryCutAt"] = at
    for name, option, values in (("account", "--uid", uids), ("binding", "--original-transaction-id", lineages)):
        times, memory = [], []
        for i in range(a.queries):
            seconds, _, resident, status, _, err = measure([ledger, name, option, values[i % len(values)], "--at", str(at), "--store", store])
            if status != 0:
                sys.exit(f"{label}: {name} exited {status}: {err.decode()[-500:]}")
            times.append(seconds * 1000)
            memory.append(resident)
        figures[f"{name}AtMilliseconds"] = round(statistics.median(times), 1)
        figures[f"{name}AtPeakResidentMiB"] = round(max(memory), 1)
    print(json.dumps(figures), flush=True)


for entry in a.ledgers:
    ledger, _, label = entry.partition("=")
    run(ledger, label or os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(ledger))))))
