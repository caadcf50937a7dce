#!/usr/bin/env python3
"""Crash soak for `ledger submit` (`make soak`; docs/testing.md). Standard library only.

Each cycle starts WRITERS concurrent `ledger submit --trust-decoded` processes on one store, streams them
purchase, renewal and restore lines over a shared pool of lineages and accounts (so writers race to bind
the same lineage), and SIGKILLs every writer at its own random moment. After each kill it checks, through
the `ledger` binary only (so it keeps working whatever the storage format):

  1. `ledger verify` passes (chain, invariants, read models, indexes);
  2. every answered decision is present: re-submitting each line answered in the cycle is answered
     `duplicate: true` with the same decision and code, and each lineage an answer granted is bound to
     that answer's account (`ledger binding`, for up to --bindings of them per cycle);
  3. no lineage has two owners: no two answers ever granted one lineage to two accounts, and `ledger
     binding` agrees.

Lines sent but not answered before a kill are sent again in the next cycle, as a client retrying would.
Prints a summary (cycles, acknowledged decisions checked, failures) and exits 1 on any failure, keeping
the store for inspection.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BUNDLE = "com.example.soak"
PRODUCT = "com.example.soak.monthly"
DAY = 86_400_000


class Workload:
    """Lines over a shared pool: new purchases, renewals and restores of known lineages by random accounts."""

    def __init__(self, seed, accounts, writers):
        self.random = random.Random(seed)
        self.accounts = [f"acct-{i}" for i in range(accounts)]
        self.lineages = []
        self.next_lineage = 0
        self.next_transaction = 0
        self.time = 1_793_491_200_000
        self.lock = threading.Lock()
        self.writers = writers

    def line(self, writer):
        with self.lock:
            self.time += self.random.randint(1, 5_000)
            self.next_transaction += 1
            transaction_id = str(5_000_000_000_000_000 + self.next_transaction)
            kind = self.random.choices(["purchase", "renewal", "restore"], [4, 3, 3])[0]
            if kind == "purchase" or not self.lineages:
                kind = "purchase"
                self.next_lineage += 1
                original = str(4_000_000_000_000_000 + self.next_lineage)
                self.lineages.append(original)
            else:
                original = self.random.choice(self.lineages[-400:])
            account = self.random.choice(self.accounts)
            at = self.time
            transaction = {
                "originalTransactionId": original, "transactionId": transaction_id, "productId": PRODUCT,
                "bundleId": BUNDLE, "purchaseDate": at, "expiresDate": at + 30 * DAY,
                "inAppOwnershipType": "PURCHASED", "environment": "Production", "signedDate": at,
                "type": "Auto-Renewable Subscription",
            }
            ident = f"w{writer}-{self.next_transaction}"
            line = {"id": ident, "type": kind, "account": account, "transaction": transaction, "at": at}
            return ident, json.dumps(line, separators=(",", ":"), sort_keys=True), original, account


class Writer:
    """One `ledger submit` process: a thread feeds its lines, another reads its answers."""

    def __init__(self, ledger, store, lines):
        self.lines = lines  # [(id, text, lineage, account)]
        self.answers = {}
        self.process = subprocess.Popen(
            [ledger, "submit", "--trust-decoded", "--store", store], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, bufsize=0)
        self.feeder = threading.Thread(target=self.feed, daemon=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.feeder.start()
        self.reader.start()

    def feed(self):
        try:
            for _, text, _, _ in self.lines:
                self.process.stdin.write((text + "\n").encode())
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def read(self):
        for raw in self.process.stdout:
            try:
                answer = json.loads(raw)
            except ValueError:
                continue
            if "id" in answer:
                self.answers[answer["id"]] = answer

    def kill(self):
        try:
            self.process.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self):
        self.process.wait()
        self.reader.join()
        self.feeder.join(timeout=5)


def run(ledger, arguments, stdin=None):
    return subprocess.run([ledger] + arguments, input=stdin, capture_output=True, text=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledger", default=".build/release/ledger")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 300)))
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--lines", type=int, default=3000, help="lines offered to each writer per cycle")
    parser.add_argument("--accounts", type=int, default=300)
    parser.add_argument("--bindings", type=int, default=100, help="granted lineages checked with `ledger binding` per cycle")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--store", help="store directory (default: a new temporary one, removed unless a check fails)")
    options = parser.parse_args()
    ledger = os.path.abspath(options.ledger)
    temporary = options.store is None
    store = options.store or os.path.join(tempfile.mkdtemp(prefix="ledger-soak-"), "store")
    init = run(ledger, ["init", "--store", store, "--bundle-id", BUNDLE, "--environment", "Production", "--app-apple-id", "1"])
    if init.returncode != 0:
        sys.exit(f"soak: init failed: {init.stderr}")

    chooser = random.Random(options.seed)
    workload = Workload(options.seed, options.accounts, options.writers)
    pending = [[] for _ in range(options.writers)]  # lines sent but never answered, sent again next cycle
    owners = {}  # lineage -> account, from every grant ever answered
    cycles = checked = kills_mid_stream = 0
    failures = []

    def fail(message):
        failures.append(message)
        print(f"soak: FAILURE: {message}", file=sys.stderr)

    print(f"soak: {options.writers} writers, seed {options.seed}, store {store}, {options.seconds:.0f} s", file=sys.stderr)
    deadline = time.monotonic() + options.seconds
    while time.monotonic() < deadline and not failures:
        cycles += 1
        batches = []
        for index in range(options.writers):
            fresh = [workload.line(index) for _ in range(options.lines - len(pending[index]))]
            batches.append(pending[index] + fresh)
        writers = [Writer(ledger, store, batch) for batch in batches]
        # Kill each writer at its own random moment: early (start-up, open), mid-stream, or as it ends.
        moments = sorted((chooser.uniform(0.02, 2.0), index) for index in range(options.writers))
        started = time.monotonic()
        for moment, index in moments:
            time.sleep(max(0.0, started + moment - time.monotonic()))
            writers[index].kill()
        for writer in writers:
            writer.wait()

        acknowledged = []
        for index, writer in enumerate(writers):
            answered = [line for line in writer.lines if line[0] in writer.answers]
            pending[index] = [line for line in writer.lines if line[0] not in writer.answers]
            if pending[index] and answered:
                kills_mid_stream += 1
            acknowledged += [(line, writer.answers[line[0]]) for line in answered]

        # 1. verify.
        verify = run(ledger, ["verify", "--store", store])
        if verify.returncode != 0:
            fail(f"cycle {cycles}: verify exit {verify.returncode}: {verify.stdout[-500:]} {verify.stderr[-500:]}")
            break

        # 3 (from the answers). No lineage granted to two accounts.
        granted = {}
        for (ident, _, lineage, account), answer in acknowledged:
            if answer.get("decision") == "invalid":
                fail(f"cycle {cycles}: {ident} answered invalid: {answer}")
            if answer.get("decision") != "granted":
                continue
            owner = owners.setdefault(lineage, account)
            if owner != account:
                fail(f"cycle {cycles}: lineage {lineage} granted to {account} by {ident}, already granted to {owner}")
            granted[lineage] = account

        # 2. Re-submitting every answered line gives the same decision, as a duplicate.
        if acknowledged:
            again = run(ledger, ["submit", "--trust-decoded", "--store", store], "".join(line[1] + "\n" for line, _ in acknowledged))
            answers = {}
            for raw in again.stdout.splitlines():
                answer = json.loads(raw)
                answers[answer.get("id")] = answer
            for (ident, _, _, _), first in acknowledged:
                second = answers.get(ident)
                if second is None:
                    fail(f"cycle {cycles}: re-submitted {ident} was not answered ({again.stderr[-300:]})")
                elif second.get("duplicate") is not True or (second.get("decision"), second.get("code")) != (
                    first.get("decision"), first.get("code")):
                    fail(f"cycle {cycles}: re-submitted {ident}: first {first}, then {second}")
                checked += 1

        # 2 and 3 (from the store). Lineages granted in this cycle are bound to the account the answer named.
        for lineage, account in chooser.sample(sorted(granted.items()), min(len(granted), options.bindings)):
            binding = run(ledger, ["binding", "--original-transaction-id", lineage, "--store", store])
            try:
                view = json.loads(binding.stdout.splitlines()[-1])
            except (ValueError, IndexError):
                fail(f"cycle {cycles}: binding {lineage}: exit {binding.returncode} {binding.stderr[-300:]}")
                continue
            if view.get("state") != "bound" or view.get("account") != account:
                fail(f"cycle {cycles}: lineage {lineage} granted to {account}, but binding says {view}")

        print(
            f"soak: cycle {cycles}: {len(acknowledged)} answered, {sum(len(p) for p in pending)} to resend, "
            f"{len(granted)} lineages granted; {checked} checked so far", file=sys.stderr)

    print(
        f"soak: {cycles} cycles, {checked} acknowledged decisions checked, {len(failures)} failures "
        f"({options.writers} writers, {kills_mid_stream} writer kills mid-stream, {len(owners)} lineages owned, seed {options.seed})")
    if failures:
        print(f"soak: store kept for inspection: {store}")
        sys.exit(1)
    if temporary:
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)


if __name__ == "__main__":
    main()
