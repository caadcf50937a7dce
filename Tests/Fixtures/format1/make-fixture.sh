#!/usr/bin/env bash
# Builds the format-1 fixture (store, keys, dispute bundle, checkpoint) with a format-1 `ledger`
# binary (release build of main at 1ba8c38). Run once; the outputs are committed.
#   Tests/Fixtures/format1/make-fixture.sh /path/to/format-1/ledger
set -euo pipefail
LEDGER=${1:?give the format-1 ledger binary}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
S=$WORK/store
K=$WORK/keys
mkdir -p "$K"
for who in root olivia adam; do "$LEDGER" support keygen --out "$K/$who.key" >/dev/null; done
"$LEDGER" init --store "$S" --bundle-id com.myrecipes.app --environment Sandbox \
    --admin root --admin-public-key "$K/root.key.pub" >/dev/null
"$LEDGER" support enroll --store "$S" --staff olivia --roles operator --public-key "$K/olivia.key.pub" \
    --admin root --admin-key "$K/root.key" >/dev/null
"$LEDGER" support enroll --store "$S" --staff adam --roles approver --public-key "$K/adam.key.pub" \
    --admin root --admin-key "$K/root.key" >/dev/null
python3 - "$WORK/lines.jsonl" <<'PY'
import json, sys
DAY = 86400000
T = 1793491200000  # 2026-11-01
def tx(otid, tid, at, own="PURCHASED", days=30, revoked=None):
    t = {"originalTransactionId": otid, "transactionId": tid, "productId": "com.myrecipes.premium.monthly",
         "bundleId": "com.myrecipes.app", "purchaseDate": at, "expiresDate": at + days * DAY,
         "inAppOwnershipType": own, "environment": "Sandbox", "signedDate": at}
    if revoked is not None:
        t["revocationDate"] = revoked
    return t
def note(kind, uuid, t, at, delivered=None):
    return {"type": "notification", "at": delivered or at, "notification": {"notificationType": kind, "notificationUUID": uuid,
            "signedDate": at, "data": {"environment": "Sandbox", "bundleId": "com.myrecipes.app", "transaction": t}}}
A, C, D, F = "2000000000000001", "2000000000000002", "2000000000000003", "2000000000000004"
lines = [
    {"type": "purchase", "account": "alice", "transaction": tx(A, A, T), "at": T},
    {"type": "restore", "account": "alice", "transaction": tx(A, A, T), "at": T + 3600000},
    {"type": "restore", "account": "bob", "transaction": tx(A, A, T), "at": T + 7200000},
    {"type": "purchase", "account": "carol", "transaction": tx(C, C, T), "at": T},
    {"type": "purchase", "account": "dave", "transaction": tx(D, D, T + DAY), "at": T + DAY},
    note("DID_RENEW", "uuid-renew-a", tx(A, "2000000000000101", T + 30 * DAY), T + 30 * DAY),
    note("DID_RENEW", "uuid-renew-a", tx(A, "2000000000000101", T + 30 * DAY), T + 30 * DAY, T + 30 * DAY + 60000),
    {"type": "renewal", "account": "dave", "transaction": tx(D, "2000000000000301", T + 31 * DAY), "at": T + 31 * DAY},
    note("REFUND", "uuid-refund-d", tx(D, "2000000000000301", T + 31 * DAY, revoked=T + 32 * DAY), T + 32 * DAY),
    {"type": "renewal", "account": "dave", "transaction": tx(D, "2000000000000301", T + 31 * DAY), "at": T + 33 * DAY},
    note("REFUND_REVERSED", "uuid-reversed-d", tx(D, "2000000000000301", T + 31 * DAY), T + 34 * DAY),
    note("EXPIRED", "uuid-expired-a", tx(A, "2000000000000101", T + 30 * DAY), T + 60 * DAY),
    {"type": "restore", "account": "erin", "transaction": tx(F, F, T, own="FAMILY_SHARED"), "at": T},
    {"type": "delete-account", "account": "carol", "at": T + 2 * DAY},
    {"type": "restore", "account": "carol2", "transaction": tx(C, "2000000000000201", T + 3 * DAY), "at": T + 3 * DAY},
]
with open(sys.argv[1], "w") as f:
    for line in lines:
        f.write(json.dumps(line) + "\n")
PY
"$LEDGER" submit --trust-decoded --store "$S" < "$WORK/lines.jsonl" > "$WORK/answers.jsonl"
# The operator cannot approve their own case: one refusal on record.
"$LEDGER" support request --store "$S" --case CASE-1 --reason "customer lost the deleted account" \
    --original-transaction-id 2000000000000002 --target-account carol2 --target-auth "reauth+otp" \
    --evidence "order MR1234" --operator olivia --key "$K/olivia.key" >/dev/null
"$LEDGER" support approve --store "$S" --case CASE-1 --approver olivia --key "$K/olivia.key" >/dev/null 2>&1 || true
"$LEDGER" support approve --store "$S" --case CASE-1 --approver adam --key "$K/adam.key" >/dev/null
"$LEDGER" support transfer --store "$S" --case CASE-1 --apply --staff adam --key "$K/adam.key" >/dev/null
python3 - "$WORK/after.jsonl" <<'PY'
import json, sys
DAY = 86400000
T = 1793491200000
C = "2000000000000002"
t = {"originalTransactionId": C, "transactionId": "2000000000000202", "productId": "com.myrecipes.premium.monthly",
     "bundleId": "com.myrecipes.app", "purchaseDate": T + 40 * DAY, "expiresDate": T + 70 * DAY,
     "inAppOwnershipType": "PURCHASED", "environment": "Sandbox", "signedDate": T + 40 * DAY}
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"type": "restore", "account": "carol2", "transaction": t, "at": T + 40 * DAY}) + "\n")
PY
"$LEDGER" submit --trust-decoded --store "$S" < "$WORK/after.jsonl" >> "$WORK/answers.jsonl"
"$LEDGER" verify --store "$S" >/dev/null
"$LEDGER" dispute export --store "$S" --original-transaction-id 2000000000000002 --out "$WORK/dispute-C.json" >/dev/null
"$LEDGER" checkpoint --store "$S" --out "$WORK/checkpoint.txt" --public-key-out "$WORK/signing.pub" >/dev/null
"$LEDGER" log --store "$S" > "$WORK/log.jsonl"
rm -rf "$HERE/store"
mkdir -m 700 "$HERE/store"
# Only live pages, so the committed file stays small.
"$LEDGER" compact --store "$S" >/dev/null
cp -p "$S/data.mdb" "$S/ledger.key" "$S/ledger-signing.key" "$HERE/store/"
chmod 600 "$HERE/store/"*
cp "$WORK/dispute-C.json" "$WORK/checkpoint.txt" "$WORK/signing.pub" "$HERE/"
# What format 1 answers after every record (the upgrade test expects the same from format 2).
AT=2027-01-05T00:00:00.000Z
: > "$HERE/answers.jsonl"
answer() {
    python3 -c 'import json, sys; print(json.dumps({"arguments": sys.argv[2:], "answer": json.loads(sys.argv[1])}, sort_keys=True))' \
        "$("$LEDGER" "$@" --store "$S")" "$@" >> "$HERE/answers.jsonl"
}
for id in 2000000000000001 2000000000000002 2000000000000003 2000000000000004; do
    answer binding --original-transaction-id "$id" --at "$AT"
done
for uid in alice bob carol carol2 dave erin; do answer account --uid "$uid" --at "$AT"; done
echo "fixture written to $HERE"
