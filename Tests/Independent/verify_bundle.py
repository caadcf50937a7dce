#!/usr/bin/env python3
"""An independent verifier of the ledger's signed files, written from docs/forensics.md and
docs/storage-format.md alone, with the Python standard library only (no code of the ledger).

    python3 verify_bundle.py FILE PUBLIC_KEY_PEM
    python3 verify_bundle.py --decode < LINES        (each line "SEQ BASE64": prints each record's JSON)

FILE is a dispute bundle (ownership-ledger-dispute/v2) or a release evidence file
(ownership-ledger-evidence/v1). The operator who exports these files holds the signing key, so a
signature alone proves only that the operator wrote the file: everything a reader relies on must
follow from the proven record bytes. It checks:

- the file is one line of canonical JSON ending in one newline: no duplicate key, integers only, and
  exactly the bytes of its own canonical serialization (keys sorted, no whitespace, "/" and non-ASCII
  characters as they are); its "format" is known;
- the embedded "publicKey" is the key given;
- the file signature: Ed25519 over the format's label and the file's bytes without the final
  newline and without the "bundleSignature" member (which sorts first, so it is the first member);
- the checkpoint: a C2SP signed note whose origin is "ownership-ledger/" + the first 8 hex digits of
  SHA-256(raw public key), signed under that origin as key name with key hash
  SHA-256(name || 0x0A || 0x01 || raw key)[:4];
- the records: sequence numbers strictly increasing (no record twice, none out of order), each
  within the checkpoint; each record's inclusion proof (RFC 6962 / RFC 9162 2.1.3.2) from
  SHA-256(0x00 || stored bytes) to the checkpoint's root, at leaf seq - 1 of a tree of the
  checkpoint's size; a withheld record's leaf hash has a valid proof;
- each record's stored bytes decode as storage format 2 (docs/storage-format.md, "Record (format 2)"
  and "Events": every field, strictly, one encoding per record) and its "record" JSON is exactly
  that decoding rendered as `ledger log` renders it: the JSON is never believed, it is recomputed;
- a dispute bundle: every record shown names the bundle's lineage, or is a transfer approval or
  refusal of a case that a request or apply of the lineage in the bundle names (with records
  withheld, such a step is accepted as the exporter says: the request may be the withheld one);
  "requestingAccount" names a 16-byte pseudonym;
- an evidence file: every record is recorded at or after "since"; the five scenarios in order,
  each with its title; a found scenario's records are in the file and pass the scenario's rule
  (docs/forensics.md, "Release evidence"), and its explanation is the rule's sentence; a missing
  scenario lists no record and says what it needs; every record belongs to a scenario; "missing"
  and "complete" match.

Prints a JSON summary; exits 0 when everything holds, 1 otherwise. Ed25519 verification is RFC 8032's
reference algorithm (slow, and fine for a few signatures).
"""
import base64
import hashlib
import json
import re
import sys

LABELS = {
    "ownership-ledger-dispute/v2": b"ownership-ledger/dispute-bundle/v2\n",
    "ownership-ledger-evidence/v1": b"ownership-ledger/evidence/v1\n",
}

# RFC 8032, section 6 (reference implementation), verification only.
P = 2**255 - 19
Q = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _recover_x(y, sign):
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P)
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


def _add(a, b):
    e1, f1 = (a[1] - a[0]) * (b[1] - b[0]) % P, (a[1] + a[0]) * (b[1] + b[0]) % P
    c, d = 2 * a[3] * b[3] * D % P, 2 * a[2] * b[2] % P
    e, f, g, h = f1 - e1, d - c, d + c, f1 + e1
    return (e * f, g * h, f * g, e * h)


def _mul(s, point):
    result = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            result = _add(result, point)
        point = _add(point, point)
        s >>= 1
    return result


def _decompress(raw):
    if len(raw) != 32:
        return None
    y = int.from_bytes(raw, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


_GY = 4 * pow(5, P - 2, P) % P
_GX = _recover_x(_GY, 0)
G = (_GX, _GY, 1, _GX * _GY % P)


def ed25519_verify(public, message, signature):
    if len(public) != 32 or len(signature) != 64:
        return False
    a, r = _decompress(public), _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= Q:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % Q
    left, right = _mul(s, G), _add(r, _mul(h, a))
    return (left[0] * right[2] - right[0] * left[2]) % P == 0 and (left[1] * right[2] - right[1] * left[2]) % P == 0


class Failure(Exception):
    pass


def sha256(*parts):
    return hashlib.sha256(b"".join(parts)).digest()


def b64(text):
    if not isinstance(text, str):
        raise Failure(f"not a base64 string: {text!r:.40}")
    try:
        return base64.b64decode(text, validate=True)
    except Exception as error:
        raise Failure(f"not base64: {text[:40]!r}") from error


def raw_public_key(pem):
    if not isinstance(pem, str):
        raise Failure("the public key is not a PEM string")
    lines = [line for line in pem.strip().splitlines() if not line.startswith("-----")]
    der = b64("".join(lines))
    prefix = bytes.fromhex("302a300506032b6570032100")  # SubjectPublicKeyInfo of an Ed25519 key
    if len(der) != 44 or not der.startswith(prefix):
        raise Failure("the public key is not an Ed25519 SubjectPublicKeyInfo PEM")
    return der[12:]


# MARK: Canonical JSON (docs/forensics.md, "Dispute bundles")


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise Failure(f"the file is not in canonical form: the key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def _no_float(text):
    raise Failure(f"the file is not in canonical form: {text} is not an integer")


def _no_constant(text):
    raise Failure(f"the file is not in canonical form: {text} is not JSON")


def canonical(value):
    """The canonical serialization: sorted keys, no insignificant whitespace, "/" and non-ASCII as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def parse_canonical(data):
    """Parses a file that must be exactly its own canonical form, one line and a newline."""
    if not data.endswith(b"\n") or data.count(b"\n") != 1:
        raise Failure("the file is not one line ending in a newline")
    try:
        text = data[:-1].decode("utf-8")
    except UnicodeDecodeError as error:
        raise Failure("the file is not UTF-8") from error
    value = json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_no_float, parse_constant=_no_constant)
    if not isinstance(value, dict):
        raise Failure("the file is not a JSON object")
    if not all(key.isascii() for key in _keys(value)):
        raise Failure("the file is not in canonical form: a key is not ASCII")
    if canonical(value) != data[:-1]:
        raise Failure("the file is not in canonical form: it was edited after export")
    return value


def _keys(value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from _keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _keys(inner)


def is_int(value):
    return type(value) is int


# MARK: Times (docs/storage-format.md, "Time"; rendered as `ledger log` renders them)

MS_PER_DAY = 86_400_000


def _tdiv(a, b):
    """Division truncating toward zero (the algorithm below is written for it)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _civil_from_days(days):
    # Howard Hinnant's days_from_civil inverse, proleptic Gregorian.
    z = days + 719_468
    era = _tdiv(z if z >= 0 else z - 146_096, 146_097)
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day


def format_time(ms):
    """Milliseconds since the epoch as ISO-8601 with milliseconds and Z (a year of at least 4 digits)."""
    if not -3_155_760_000_000_000 <= ms <= 3_155_760_000_000_000:
        return f"{ms}ms"
    days = ms // MS_PER_DAY
    rest = ms - days * MS_PER_DAY
    year, month, day = _civil_from_days(days)
    seconds = rest // 1000

    def pad(value, width):
        digits = str(value)
        return digits if len(digits) >= width else "0" * (width - len(digits)) + digits

    return (
        f"{pad(year, 4)}-{pad(month, 2)}-{pad(day, 2)}T{pad(seconds // 3600, 2)}:{pad(seconds // 60 % 60, 2)}:"
        f"{pad(seconds % 60, 2)}.{pad(rest % 1000, 3)}Z"
    )


_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z$")


def parse_time(text):
    """A time as the files write it (format_time's form for years 0 to 9999), in milliseconds."""
    match = _TIME.match(text) if isinstance(text, str) else None
    if match is None:
        raise Failure(f"{text!r} is not a time")
    year, month, day, hour, minute, second, milli = (int(part) for part in match.groups())
    y = year - 1 if month <= 2 else year
    era = _tdiv(y if y >= 0 else y - 399, 400)
    yoe = y - era * 400
    doy = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146_097 + doe - 719_468
    ms = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + milli
    if format_time(ms) != text:
        raise Failure(f"{text!r} is not a time")
    return ms


# MARK: Storage format 2 (docs/storage-format.md)

# DecisionReason: code -> (decision, code, message) (docs/storage-format.md, "Events": the table of reasons).
DECISIONS = {
    1: ("granted", "ok", "Subscription verified and bound to this MyRecipes account."),
    2: ("granted", "ok", "Subscription verified; this account's entitlement is refreshed."),
    3: (
        "denied",
        "permission-denied",
        "This subscription belongs to another MyRecipes account. Sign in with the account that purchased it, or contact support to "
        "recover it.",
    ),
    4: (
        "denied",
        "permission-denied",
        "This subscription belonged to a deleted MyRecipes account. It can be moved to another account only through support recovery: "
        "contact support.",
    ),
    5: (
        "denied",
        "family-sharing-unsupported",
        "Family Sharing is not supported by MyRecipes: a subscription shared through Family Sharing does not unlock MyRecipes.",
    ),
    6: ("ignored", "not-bound", "No MyRecipes account owns this subscription; a notification never binds one. Recorded, nothing granted."),
    7: ("ignored", "tombstoned", "This subscription belongs to a deleted account; the notification was recorded and grants nothing."),
    8: ("granted", "ok", "The bound account's entitlement was extended."),
    9: ("recorded", "ok", "The bound account's entitlement ended."),
    10: ("recorded", "ok", "Apple refunded or revoked the subscription; the bound account's entitlement is revoked."),
    11: ("granted", "ok", "Apple reversed the refund; the bound account's entitlement is reinstated."),
    12: ("recorded", "ok", "Notification recorded; no entitlement changed."),
    13: ("denied", "revoked", "Apple refunded or revoked this transaction; nothing is granted."),
    14: ("recorded", "expired", "The subscription had already expired; renew it in the App Store to regain access."),
    15: (
        "recorded",
        "ok",
        "Account deleted. Deleting a MyRecipes account does not cancel Apple billing: manage or cancel the subscription in the Apple "
        "ID's Subscriptions settings.",
    ),
    16: ("ignored", "unknown-account", "No MyRecipes account with this identity is known to the ledger; nothing was deleted."),
    17: ("recorded", "ok", "Reconciliation found the subscription expired or revoked; the bound account's entitlement ended."),
    18: (
        "denied",
        "revoked",
        "Apple refunded or revoked this purchase; a transaction from before the refund cannot restore it. Nothing is granted.",
    ),
    19: (
        "ignored",
        "awaiting-restore",
        "This subscription was moved to this MyRecipes account by support; it grants nothing until the account runs Restore Purchases.",
    ),
    20: (
        "recorded",
        "upgraded",
        "This transaction was upgraded to another subscription of the same group; it grants nothing. Restore purchases to verify the "
        "upgraded subscription.",
    ),
    21: (
        "recorded",
        "expired",
        "The subscription had already expired; it is now tied to this MyRecipes account. Renew it in the App Store to regain access.",
    ),
}
BOUND_TO_ANOTHER_ACCOUNT, FAMILY_SHARED = 3, 5

NOTIFICATION_TYPES = [
    "SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "DID_CHANGE_RENEWAL_PREF", "DID_FAIL_TO_RENEW", "EXPIRED",
    "GRACE_PERIOD_EXPIRED", "OFFER_REDEEMED", "PRICE_INCREASE", "REFUND", "REFUND_DECLINED", "REFUND_REVERSED",
    "RENEWAL_EXTENDED", "RENEWAL_EXTENSION", "REVOKE", "CONSUMPTION_REQUEST", "TEST", "EXTERNAL_PURCHASE_TOKEN",
    "ONE_TIME_CHARGE", "METADATA_UPDATE", "MIGRATION", "PRICE_CHANGE", "RESCIND_CONSENT",
]
NOTIFICATION_SUBTYPES = [
    "INITIAL_BUY", "RESUBSCRIBE", "DOWNGRADE", "UPGRADE", "AUTO_RENEW_ENABLED", "AUTO_RENEW_DISABLED", "VOLUNTARY",
    "BILLING_RETRY", "PRICE_INCREASE", "GRACE_PERIOD", "PENDING", "ACCEPTED", "BILLING_RECOVERY", "PRODUCT_NOT_FOR_SALE",
    "SUMMARY", "FAILURE", "UNREPORTED", "ACTIVE_TOKEN_REMINDER", "CREATED",
]
ENVIRONMENTS = ["Production", "Sandbox", "Xcode", "LocalTesting"]
KINDS = {1: "purchase", 2: "renewal", 3: "restore", 4: "reconciliation"}
END_REASONS = {1: "expired", 2: "account-deleted", 3: "transferred"}
PROVENANCES = {1: "verified-jws", 2: "trusted-decoded", 3: "legacy-receipt"}
ROLES = [(1, "operator"), (2, "approver"), (4, "administrator")]
EVENTS = {
    1: "transaction-submitted", 2: "notification-received", 3: "account-deletion-requested", 4: "lineage-bound",
    5: "entitlement-granted", 6: "entitlement-ended", 7: "entitlement-revoked", 8: "entitlement-reinstated",
    9: "lineage-tombstoned", 10: "account-deleted", 11: "staff-enrolled", 12: "staff-removed", 13: "transfer-requested",
    14: "transfer-approved", 15: "transfer-applied", 16: "transfer-refused", 17: "decision-issued", 18: "store-upgraded",
    19: "roster-change-proposed",
}
LINEAGE, ACCOUNT, PRODUCT, TAG = 0x20, 0x40, 0x80, 0x1F
INT64 = (-(2**63), 2**63 - 1)


class DecodingError(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.data, self.offset = data, 0

    def take(self, count):
        if count > len(self.data) - self.offset:
            raise DecodingError(f"truncated: needed {count} bytes at offset {self.offset}")
        value = self.data[self.offset : self.offset + count]
        self.offset += count
        return value

    def u8(self):
        return self.take(1)[0]

    def varint(self):
        """LEB128 in its shortest form, fitting 64 bits."""
        value, shift = 0, 0
        while True:
            byte = self.u8()
            if shift == 63 and byte > 1:
                raise DecodingError("a varint overflows 64 bits")
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                if byte == 0 and shift > 0:
                    raise DecodingError("a varint is not in its shortest form")
                return value
            shift += 7

    def zigzag(self):
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def short_bytes(self):
        return self.take(self.varint())

    def short_string(self):
        raw = self.short_bytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DecodingError("invalid UTF-8 in a string") from error


def offset(base, delta):
    value = base + delta
    if not INT64[0] <= value <= INT64[1]:
        raise DecodingError("a time offset overflows")
    return value


class RecordDecoder:
    """Decodes one record's events: the back-references point to the first lineage, account and product
    the record names; a value written out where a back-reference or a code applies is refused."""

    def __init__(self, at):
        self.at = at
        self.lineage = self.account = self.product = self.expires = self.purchase = None
        self.saw_transaction = False
        self.inside_proposal = False
        # What the rules need besides the JSON: times in milliseconds, decision reasons, plan bytes.
        self.raw = []

    def time(self, r):
        return offset(self.at, r.zigzag())

    def read_lineage(self, head, r):
        if head & LINEAGE:
            if self.lineage is None:
                raise DecodingError("a lineage back-reference before any lineage")
            return self.lineage
        value = r.take(16).hex()
        if self.lineage is None:
            self.lineage = value
        elif self.lineage == value:
            raise DecodingError("the record's lineage written out instead of referenced")
        return value

    def read_account(self, head, r):
        if head & ACCOUNT:
            if self.account is None:
                raise DecodingError("an account back-reference before any account")
            return self.account
        value = r.take(16).hex()
        if self.account is None:
            self.account = value
        elif self.account == value:
            raise DecodingError("the record's account written out instead of referenced")
        return value

    def read_product(self, referenced, r):
        if referenced:
            if self.product is None:
                raise DecodingError("a product back-reference before any product")
            return self.product
        value = r.short_string()
        if self.product is None:
            self.product = value
        elif self.product == value:
            raise DecodingError("the record's product written out instead of referenced")
        return value

    @staticmethod
    def allow(head, allowed, name):
        if head & ~TAG & ~allowed & 0xFF:
            raise DecodingError(f"{name} with invalid flags 0x{head:x}")

    @staticmethod
    def code(r, table, name):
        value = r.varint()
        if value == 0:
            text = r.short_string()
            if text in table:
                raise DecodingError(f"{name} {text} written out instead of coded")
            return text
        if value > len(table):
            raise DecodingError(f"unknown {name} code {value}")
        return table[value - 1]

    def transaction(self, r, raw):
        flags = r.u8()
        provenance = PROVENANCES.get(flags >> 2 & 3)
        if provenance is None:
            raise DecodingError(f"unknown provenance in {flags}")
        key = r.take(16).hex()
        product = self.read_product(flags & 0x40, r)
        purchase = self.time(r)
        expires = offset(purchase, r.zigzag()) if flags & 0x10 else None
        revocation = self.time(r) if flags & 0x20 else None
        signed = self.time(r)
        if flags & 0x80 == 0:
            code = r.u8()
            if code >= len(ENVIRONMENTS):
                raise DecodingError(f"unknown environment code {code}")
            environment = ENVIRONMENTS[code]
        else:
            environment = r.short_string()
            if environment in ENVIRONMENTS:
                raise DecodingError(f"environment {environment} written out instead of coded")
        ownership = flags & 3
        if ownership == 0:
            ownership = "PURCHASED"
        elif ownership == 1:
            ownership = "FAMILY_SHARED"
        elif ownership == 2:
            ownership = r.short_string()
            if ownership in ("PURCHASED", "FAMILY_SHARED"):
                raise DecodingError(f"ownership {ownership} written out instead of coded")
        else:
            raise DecodingError("unknown ownership code 3")
        if not self.saw_transaction:
            self.saw_transaction, self.expires, self.purchase = True, expires, purchase
        raw["purchaseDate"] = purchase
        return {
            "transactionKey": key, "productId": product, "purchaseDate": format_time(purchase),
            "expiresDate": None if expires is None else format_time(expires),
            "revocationDate": None if revocation is None else format_time(revocation), "inAppOwnershipType": ownership,
            "environment": environment, "signedDate": format_time(signed), "provenance": provenance,
        }

    def pair(self, head, r, name):
        self.allow(head, LINEAGE | ACCOUNT, name)
        lineage = self.read_lineage(head, r)
        return lineage, self.read_account(head, r)

    @staticmethod
    def signatures(flags, r, fields):
        fields["signedAfter"] = r.varint() if flags & 4 else None
        if flags & 8:
            fields["coSignedBy"], fields["coSignature"] = r.short_string(), r.short_bytes().hex()
        else:
            fields["coSignedBy"], fields["coSignature"] = None, ""

    def source(self, kind, account):
        if kind == 1:
            return {"state": "bound", "account": account}
        if kind == 2:
            return {"state": "tombstoned", "formerAccount": account}
        raise DecodingError(f"unknown plan source {kind}")

    def event(self, r):
        """One event as `ledger log` renders it (its fields and "event"), and what the rules need of it."""
        head = r.u8()
        tag = head & TAG
        name = EVENTS.get(tag)
        if name is None:
            raise DecodingError(f"unknown event tag {tag}")
        raw = {"event": name}
        if tag == 1:
            self.allow(head, LINEAGE | ACCOUNT, name)
            kind_byte = r.u8()
            kind = KINDS.get(kind_byte & 0x3F)
            if kind is None:
                raise DecodingError(f"unknown submission kind {kind_byte}")
            if kind_byte & 0x80 == 0:
                self.allow(head, LINEAGE, name + " without an account")
            account = self.read_account(head, r) if kind_byte & 0x80 else None
            fields = {"kind": kind, "lineage": self.read_lineage(head, r)}
            fields["transaction"] = self.transaction(r, raw)
            if kind_byte & 0x40:
                fields["transaction"]["isUpgraded"] = True
            if account is not None:
                fields["account"] = account
        elif tag == 2:
            self.allow(head, LINEAGE, name)
            flags = r.u8()
            if flags & ~15 or (flags & 8 and not flags & 2):
                raise DecodingError(f"{name} with invalid flags {flags}")
            if flags & 1 == 0:
                self.allow(head, 0, name + " without a lineage")
            fields = {"notificationType": self.code(r, NOTIFICATION_TYPES, "notification type")}
            if flags & 4:
                fields["subtype"] = self.code(r, NOTIFICATION_SUBTYPES, "notification subtype")
            fields["signedDate"] = format_time(self.time(r))
            if flags & 1:
                fields["lineage"] = self.read_lineage(head, r)
            if flags & 2:
                fields["transaction"] = self.transaction(r, raw)
                if flags & 8:
                    fields["transaction"]["isUpgraded"] = True
        elif tag in (3, 10):
            self.allow(head, ACCOUNT, name)
            fields = {"account": self.read_account(head, r)}
        elif tag in (4, 8):
            lineage, account = self.pair(head, r, name)
            fields = {"lineage": lineage, "account": account}
        elif tag == 5:
            flags = r.u8()
            if flags & ~15 or flags & 3 == 2 or flags & 12 == 12:
                raise DecodingError(f"{name} with invalid flags {flags}")
            fields = {"lineage": self.read_lineage(head, r), "account": self.read_account(head, r)}
            fields["productId"] = self.read_product(head & PRODUCT, r)
            expires = None
            if flags & 2:
                if not self.saw_transaction or self.expires is None:
                    raise DecodingError("an expiry back-reference without a transaction expiry")
                expires = self.expires
            elif flags & 1:
                expires = self.time(r)
                if self.saw_transaction and self.expires == expires:
                    raise DecodingError("the transaction's expiry written out instead of referenced")
            fields["expiresAt"] = None if expires is None else format_time(expires)
            raw["expiresAt"] = expires
            if flags & 4:
                if not self.saw_transaction:
                    raise DecodingError("a purchase back-reference without a transaction")
                fields["purchasedAt"] = format_time(self.purchase)
            elif flags & 8:
                purchase = self.time(r)
                if self.saw_transaction and self.purchase == purchase:
                    raise DecodingError("the transaction's purchase date written out instead of referenced")
                fields["purchasedAt"] = format_time(purchase)
        elif tag == 6:
            lineage, account = self.pair(head, r, name)
            reason = END_REASONS.get(r.u8())
            if reason is None:
                raise DecodingError("unknown end reason")
            fields = {"lineage": lineage, "account": account, "reason": reason}
        elif tag == 7:
            lineage, account = self.pair(head, r, name)
            fields = {"lineage": lineage, "account": account, "revokedAt": format_time(self.time(r))}
        elif tag == 9:
            lineage, account = self.pair(head, r, name)
            fields = {"lineage": lineage, "formerAccount": account}
        elif tag == 11:
            self.allow(head, ACCOUNT, name)
            staff, roles, public_key = r.short_string(), r.u8(), r.short_bytes()
            flags = r.u8()
            if flags & ~15:
                raise DecodingError(f"{name} with invalid flags {flags}")
            if flags & 1 == 0:
                self.allow(head, 0, name + " without an own account")
            own = self.read_account(head, r) if flags & 1 else None
            enrolled_by = r.short_string() if flags & 2 else None
            fields = {
                "staff": staff, "roles": [role for bit, role in ROLES if roles & bit], "publicKey": public_key.hex(),
                "enrolledBy": enrolled_by, "ownAccount": own, "signature": r.short_bytes().hex(),
            }
            self.signatures(flags, r, fields)
        elif tag == 12:
            self.allow(head, 0, name)
            fields = {"staff": r.short_string(), "removedBy": r.short_string(), "signature": r.short_bytes().hex()}
            flags = r.u8()
            if flags & ~12:
                raise DecodingError(f"{name} with invalid flags {flags}")
            self.signatures(flags, r, fields)
        elif tag == 19:
            self.allow(head, 0, name)
            if self.inside_proposal:
                raise DecodingError("roster-change-proposed inside another roster-change-proposed")
            self.inside_proposal = True
            try:
                change, _ = self.event(r)
            finally:
                self.inside_proposal = False
            if change["event"] not in ("staff-enrolled", "staff-removed") or change["coSignedBy"] is not None:
                raise DecodingError("roster-change-proposed holds no single-signed roster change")
            fields = {"change": change}
        elif tag == 13:
            self.allow(head, LINEAGE | ACCOUNT, name)
            case_id = r.short_string()
            lineage = self.read_lineage(head, r)
            kind = r.u8()
            source = self.source(kind & 0x7F, self.read_account(head, r))
            target = r.take(16)
            version = r.varint()
            authentication, evidence, reason = r.short_string(), r.short_string(), r.short_string()
            suffix = r.take(16) if kind & 0x80 else None
            fields = {
                "caseId": case_id, "lineage": lineage, "source": source, "target": target.hex(), "lineageVersion": version,
                "targetAuthentication": authentication, "ownershipEvidence": evidence, "reason": reason,
                "planDigest": r.take(32).hex(), "requestedBy": r.short_string(), "signature": r.short_bytes().hex(),
            }
            raw["planBytes"] = plan_bytes(case_id, lineage, suffix, kind & 0x7F, source, target, version, authentication, evidence, reason)
        elif tag == 14:
            self.allow(head, 0, name)
            fields = {
                "caseId": r.short_string(), "planDigest": r.take(32).hex(), "approvedBy": r.short_string(),
                "signature": r.short_bytes().hex(),
            }
        elif tag == 15:
            self.allow(head, LINEAGE | ACCOUNT, name)
            fields = {"caseId": r.short_string(), "planDigest": r.take(32).hex(), "lineage": self.read_lineage(head, r)}
            kind = r.u8()
            fields["source"] = self.source(kind, self.read_account(head, r))
            fields["target"] = r.take(16).hex()
            fields["appliedBy"] = r.short_string()
            fields["signature"] = r.short_bytes().hex()
        elif tag == 16:
            self.allow(head, LINEAGE, name)
            fields = {"caseId": r.short_string(), "step": r.short_string(), "staff": r.short_string(), "reason": r.short_string()}
            flags = r.u8()
            if flags & ~1:
                raise DecodingError(f"{name} with invalid flags {flags}")
            if flags & 1 == 0:
                self.allow(head, 0, name + " without a lineage")
            fields["lineage"] = self.read_lineage(head, r) if flags & 1 else None
        elif tag == 17:
            self.allow(head, LINEAGE | ACCOUNT, name)
            byte = r.u8()
            decision = DECISIONS.get(byte & 0x3F)
            if decision is None:
                raise DecodingError(f"unknown decision reason {byte & 0x3F}")
            if byte & 0x40 == 0:
                self.allow(head, ACCOUNT, name + " without a lineage")
            if byte & 0x80 == 0:
                self.allow(head, LINEAGE, name + " without an account")
            fields = {"decision": decision[0], "code": decision[1], "message": decision[2]}
            if byte & 0x40:
                fields["lineage"] = self.read_lineage(head, r)
            if byte & 0x80:
                fields["account"] = self.read_account(head, r)
            raw["reason"] = byte & 0x3F
        else:  # 18
            self.allow(head, 0, name)
            fields = {"fromFormat": r.u8(), "records": r.varint(), "headHash": r.take(32).hex(), "merkleRoot": r.take(32).hex()}
            fields["copiedRecords"] = r.varint()
        fields["event"] = name
        return fields, raw


def plan_bytes(case_id, lineage, suffix, kind, source, target, version, authentication, evidence, reason):
    """The bytes whose SHA-256 is a transfer's plan digest (docs/storage-format.md, "plan")."""

    def string(text):
        data = text.encode()
        return len(data).to_bytes(4, "big") + data

    label = "ownership-ledger/transfer-plan/v1" if suffix is not None else "ownership-ledger/transfer-plan/v2"
    account = source.get("account") or source.get("formerAccount")
    return b"".join(
        [
            string(label), string(case_id), bytes.fromhex(lineage), suffix or b"", bytes([kind]), bytes.fromhex(account), target,
            version.to_bytes(8, "big"), string(authentication), string(evidence), string(reason),
        ]
    )


class Record:
    def __init__(self, seq, recorded_at, at, json_value, raw):
        self.seq, self.recorded_at, self.at, self.json, self.raw = seq, recorded_at, at, json_value, raw

    @property
    def events(self):
        return self.json["events"]


def decode_record(stored, seq):
    """Decodes the stored bytes of record `seq` (storage format 2) into its `ledger log` JSON."""
    r = Reader(stored)
    version = r.u8()
    if version != 2:
        raise DecodingError(f"unknown record format {version}")
    recorded_at = int.from_bytes(r.take(6), "big")
    command = r.take(16).hex()
    at = offset(recorded_at, r.zigzag())
    attempt = r.varint()
    if attempt > 0xFFFFFFFF:
        raise DecodingError(f"attempt {attempt} is out of range")
    decoder = RecordDecoder(at)
    events, raws = [], []
    while r.offset < len(stored):
        fields, raw = decoder.event(r)
        events.append(fields)
        raws.append(raw)
    if not events:
        raise DecodingError("a record holds no event")
    value = {
        "seq": seq, "recordedAt": format_time(recorded_at), "at": format_time(at), "command": command, "attempt": attempt,
        "events": events,
    }
    return Record(seq, recorded_at, at, value, raws)


# MARK: Checkpoints and proofs


def verify_checkpoint(text, key):
    if not isinstance(text, str):
        raise Failure("checkpoint is missing")
    note = text.encode()
    body_end = note.find(b"\n\n")
    if body_end < 0:
        raise Failure("checkpoint: no blank line before the signatures")
    body = note[: body_end + 1]
    lines = body.decode().split("\n")[:-1]
    if len(lines) < 3 or not re.fullmatch(r"0|[1-9][0-9]*", lines[1]):
        raise Failure("checkpoint: origin, size and root are required")
    origin, size, root = lines[0], int(lines[1]), b64(lines[2])
    if origin != "ownership-ledger/" + sha256(key).hex()[:8]:
        raise Failure("checkpoint: the origin is not this key's")
    key_hash = sha256(origin.encode(), b"\n\x01", key)[:4]
    for line in note[body_end + 2 :].decode().split("\n"):
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == "\u2014" and parts[1] == origin:
            blob = b64(parts[2])
            if blob[:4] == key_hash and ed25519_verify(key, body, blob[4:]):
                return size, root
    raise Failure("checkpoint: no valid signature by the key")


def verify_inclusion(index, size, leaf, proof, root):
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = sha256(b"\x01", sibling, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = sha256(b"\x01", r, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def proven_records(bundle, size, root):
    """Checks every entry's place and proof, decodes the records shown and compares their JSON.
    Returns the records shown (ascending) and the sequence numbers withheld."""
    entries = bundle.get("records")
    if not isinstance(entries, list):
        raise Failure("records are missing")
    records, withheld, last = [], [], 0
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise Failure(f"record {position + 1}: not an object")
        seq = entry.get("seq")
        if not is_int(seq) or not 1 <= seq <= size or seq <= last:
            raise Failure(f"record {position + 1}: sequence number missing, out of order, repeated or outside the checkpoint")
        last = seq
        proof = entry.get("inclusionProof")
        if not isinstance(proof, list):
            raise Failure(f"record {seq}: inclusionProof is missing")
        proof = [b64(sibling) for sibling in proof]
        if "withheld" in entry:
            leaf = b64(entry.get("leafHash"))
        else:
            stored = b64(entry.get("stored"))
            leaf = sha256(b"\x00", stored)
        if not verify_inclusion(seq - 1, size, leaf, proof, root):
            raise Failure(f"record {seq}: the inclusion proof does not lead to the checkpoint's root")
        if "withheld" in entry:
            withheld.append(seq)
            continue
        try:
            record = decode_record(stored, seq)
        except DecodingError as error:
            raise Failure(f"record {seq}: its stored bytes do not decode: {error}") from error
        if not isinstance(entry.get("record"), dict) or canonical(entry["record"]) != canonical(record.json):
            raise Failure(f"record {seq}: the decoded JSON does not match the stored bytes")
        records.append(record)
    return records, withheld


# MARK: Dispute bundles (docs/forensics.md, "Dispute bundles")


def concerns(record, lineage, visible, withheld):
    """Whether a record belongs to the lineage's history."""
    if any(event.get("lineage") == lineage for event in record.events):
        return True
    cases = [event["caseId"] for event in record.events if event["event"] in ("transfer-approved", "transfer-refused")]
    if len(cases) != len(record.events):
        return False
    if withheld:
        return True
    return all(
        any(
            event["event"] in ("transfer-requested", "transfer-applied") and event["caseId"] == case and event["lineage"] == lineage
            for other in visible
            for event in other.events
        )
        for case in cases
    )


def verify_dispute(bundle, size, root):
    lineage = bundle.get("lineage")
    if not isinstance(lineage, str) or not re.fullmatch(r"[0-9a-f]{32}", lineage):
        raise Failure("lineage is missing or not 16 bytes of lowercase hex")
    records, withheld = proven_records(bundle, size, root)
    for record in records:
        if not concerns(record, lineage, records, bool(withheld)):
            raise Failure(f"record {record.seq} belongs to another lineage")
    summary = {"lineage": lineage, "records": len(records)}
    if "requestingAccount" in bundle:
        requester = bundle["requestingAccount"]
        if not isinstance(requester, dict) or not re.fullmatch(r"[0-9a-f]{32}", str(requester.get("account"))):
            raise Failure("requestingAccount is malformed")
        summary["requestingAccount"] = requester["account"]
    if withheld:
        summary["withheld"] = withheld
    return summary


# MARK: Release evidence (docs/forensics.md, "Release evidence")

SCENARIOS = [
    (
        "device-a-device-b",
        "Device A / Device B",
        "a purchase, then a restore of the same lineage by the same account, both granted",
    ),
    ("same-device-account-switch", "same-device account switch", "a restore by another account denied, with the binding unmoved"),
    (
        "deletion-with-active-billing",
        "deletion with active Apple billing",
        "a deletion while entitled, then a later renewal (notification or transaction) purchased after it that granted nobody",
    ),
    ("family-sharing-not-supported", "Family Sharing not supported", "a family-shared transaction or notification refused"),
    (
        "support-recovery",
        "support recovery",
        "an approved and applied transfer, then the target account's verified restore, granted",
    ),
]


def short_account(account):
    return "account \u2026" + account[-8:]


def short_lineage(lineage):
    return lineage[:8] + "\u2026"


def apple_facts(record):
    """The Apple transaction a record's fact carries: (lineage, transaction, raw, words naming the fact)."""
    fact, raw = record.events[0], record.raw[0]
    if fact["event"] == "transaction-submitted":
        return fact["lineage"], fact["transaction"], raw, f"a {fact['kind']} transaction"
    if fact["event"] == "notification-received" and "lineage" in fact and "transaction" in fact:
        return fact["lineage"], fact["transaction"], raw, f"a {fact['notificationType']} notification"
    return None


def submission(record, kind):
    fact = record.events[0]
    return fact if fact["event"] == "transaction-submitted" and fact["kind"] == kind else None


def decision_reason(record):
    for event, raw in reversed(list(zip(record.events, record.raw))):
        if event["event"] == "decision-issued":
            return raw["reason"]
    return None


def outcome(record):
    reason = decision_reason(record)
    return None if reason is None else DECISIONS[reason][0]


def granted(record, lineage, account):
    return outcome(record) == "granted" and any(
        event["event"] == "entitlement-granted" and event["lineage"] == lineage and event["account"] == account for event in record.events
    )


def changes_ownership(record):
    return any(
        event["event"] in ("lineage-bound", "entitlement-granted", "transfer-applied", "entitlement-reinstated") for event in record.events
    )


def explain(scenario, records, environment):
    """The scenario's rule on its records: the one-line explanation, or Failure naming what does not hold."""

    def fail(reason):
        return Failure(f"{scenario}: {reason}")

    for record in records:
        facts = apple_facts(record)
        if facts is None:
            continue
        if facts[1]["provenance"] != "verified-jws":
            raise Failure(f"record {record.seq}: its transaction is {facts[1]['provenance']}, not verified signed data")
        if facts[1]["environment"] != environment:
            raise Failure(f"record {record.seq}: its transaction is from {facts[1]['environment']}, not {environment}")
    if any(a.seq >= b.seq for a, b in zip(records, records[1:])):
        raise fail("the records are not in log order")
    seqs = [record.seq for record in records]
    if scenario == "device-a-device-b":
        purchase = submission(records[0], "purchase") if len(records) == 2 else None
        restore = submission(records[1], "restore") if len(records) == 2 else None
        if purchase is None or restore is None or "account" not in purchase:
            raise fail("expected a purchase and a restore")
        account, lineage = purchase["account"], purchase["lineage"]
        if restore.get("account") != account or restore["lineage"] != lineage:
            raise fail("the restore is not of the purchased lineage by the same account")
        if not granted(records[0], lineage, account) or not granted(records[1], lineage, account):
            raise fail("the purchase and the restore were not both granted to the account")
        return (
            f"{short_account(account)} purchased lineage {short_lineage(lineage)} (seq {seqs[0]}, granted) and restored the same "
            f"purchase with the same account, as on a second device (seq {seqs[1]}, granted): device identity is not an "
            "entitlement input"
        )
    if scenario == "same-device-account-switch":
        bound = None
        if len(records) == 2 and records[0].events[0]["event"] == "transaction-submitted":
            bound = next((event for event in records[0].events if event["event"] == "lineage-bound"), None)
        restore = submission(records[1], "restore") if len(records) == 2 else None
        if bound is None or restore is None or "account" not in restore:
            raise fail("expected the record that bound the lineage and a restore")
        if bound["lineage"] != restore["lineage"] or restore["account"] == bound["account"]:
            raise fail("the restore is not of the bound lineage by another account")
        if decision_reason(records[1]) != BOUND_TO_ANOTHER_ACCOUNT or changes_ownership(records[1]):
            raise fail("the restore was not denied permission-denied with nothing moved or granted")
        return (
            f"lineage {short_lineage(bound['lineage'])} was bound to {short_account(bound['account'])} (seq {seqs[0]}); a restore by "
            f"{short_account(restore['account'])} was denied permission-denied and moved nothing (seq {seqs[1]})"
        )
    if scenario == "deletion-with-active-billing":
        grant = None
        if len(records) == 3 and apple_facts(records[0]) is not None:
            grant = next(
                ((event, raw) for event, raw in zip(records[0].events, records[0].raw) if event["event"] == "entitlement-granted"), None
            )
        if grant is None or records[1].events[0]["event"] != "account-deletion-requested":
            raise fail("expected a grant, a deletion and a renewal")
        (grant, grant_raw), deletion = grant, records[1]
        lineage, deleted = grant["lineage"], deletion.events[0]["account"]
        ended = {"event": "entitlement-ended", "lineage": lineage, "account": deleted, "reason": "account-deleted"}
        tombstoned = {"event": "lineage-tombstoned", "lineage": lineage, "formerAccount": deleted}
        if deleted != grant["account"] or ended not in deletion.events or tombstoned not in deletion.events:
            raise fail("the deletion did not end the granted account's entitlement and tombstone the lineage")
        expires = grant_raw["expiresAt"]
        if expires is None or not deletion.at < expires:
            raise fail("the account was not entitled when it was deleted (its entitlement had expired)")
        renewal = apple_facts(records[2])
        if renewal is None or renewal[0] != lineage or not renewal[2]["purchaseDate"] > deletion.at:
            raise fail("the last record is not a transaction of the lineage purchased after the deletion")
        if outcome(records[2]) == "granted" or changes_ownership(records[2]):
            raise fail("the renewal after the deletion granted or bound something")
        reason = decision_reason(records[2])
        code = "no decision" if reason is None else DECISIONS[reason][1]
        return (
            f"{short_account(deleted)} was entitled to lineage {short_lineage(lineage)} until {format_time(expires)} (seq {seqs[0]}) "
            f"and deleted at {format_time(deletion.at)} (seq {seqs[1]}: tombstoned, entitlement ended, Apple billing continues); then "
            f"{renewal[3]} for a transaction purchased {format_time(renewal[2]['purchaseDate'])} granted nobody (seq {seqs[2]}, {code})"
        )
    if scenario == "family-sharing-not-supported":
        shared = apple_facts(records[0]) if len(records) == 1 else None
        if shared is None or shared[1]["inAppOwnershipType"] != "FAMILY_SHARED":
            raise fail("expected one FAMILY_SHARED transaction or notification")
        if decision_reason(records[0]) != FAMILY_SHARED or changes_ownership(records[0]):
            raise fail("the family-shared transaction was not refused family-sharing-unsupported")
        return (
            f"{shared[3]} with inAppOwnershipType FAMILY_SHARED was refused family-sharing-unsupported and bound or granted nothing "
            f"(seq {seqs[0]})"
        )
    # support-recovery
    request = approval = applied = restore = None
    if len(records) == 4:
        request = (records[0].events[0], records[0].raw[0]) if records[0].events[0]["event"] == "transfer-requested" else None
        approval = records[1].events[0] if records[1].events[0]["event"] == "transfer-approved" else None
        applied = next((event for event in records[2].events if event["event"] == "transfer-applied"), None)
        restore = submission(records[3], "restore")
    if request is None or approval is None or applied is None or restore is None:
        raise fail("expected a request, an approval, an apply and a restore")
    request, request_raw = request
    if sha256(request_raw["planBytes"]).hex() != request["planDigest"]:
        raise fail("the plan digest is not the plan's SHA-256")
    case, digest = request["caseId"], request["planDigest"]
    if approval["caseId"] != case or applied["caseId"] != case or approval["planDigest"] != digest or applied["planDigest"] != digest:
        raise fail("the approval and the apply are not of the requested plan")
    if approval["approvedBy"] == request["requestedBy"]:
        raise fail("the operator approved their own request")
    if (
        applied["lineage"] != request["lineage"]
        or applied["target"] != request["target"]
        or any(event["event"] == "entitlement-granted" for event in records[2].events)
    ):
        raise fail("the apply moved another lineage, or to another account, or granted")
    if restore.get("account") != request["target"] or restore["lineage"] != request["lineage"]:
        raise fail("the target account's restore of the lineage was not granted")
    if not granted(records[3], request["lineage"], request["target"]):
        raise fail("the target account's restore of the lineage was not granted")
    return (
        f"case {case}: {request['requestedBy']} requested moving lineage {short_lineage(request['lineage'])} to "
        f"{short_account(request['target'])} (seq {seqs[0]}), {approval['approvedBy']} approved the same plan {digest[:12]}\u2026 "
        f"(seq {seqs[1]}), {applied['appliedBy']} applied it, granting nothing (seq {seqs[2]}); the target's verified restore was "
        f"granted (seq {seqs[3]})"
    )


def verify_evidence(bundle, size, root):
    environment = bundle.get("environment")
    if not isinstance(environment, str):
        raise Failure("environment is missing")
    if "since" not in bundle:
        raise Failure("since is missing")
    since = bundle["since"]
    if since is not None:
        since = parse_time(since)
    records, withheld = proven_records(bundle, size, root)
    if withheld:
        raise Failure("an evidence file withholds no record")
    by_seq = {record.seq: record for record in records}
    for record in records:
        if since is not None and record.recorded_at < since:
            raise Failure(f"record {record.seq} was recorded before since")
    claims = bundle.get("scenarios")
    if not isinstance(claims, list) or [claim.get("scenario") if isinstance(claim, dict) else None for claim in claims] != [
        name for name, _, _ in SCENARIOS
    ]:
        raise Failure("scenarios must list " + ", ".join(name for name, _, _ in SCENARIOS) + " in that order")
    missing, used = [], set()
    for (name, title, requirement), claim in zip(SCENARIOS, claims):
        found, seqs, explanation = claim.get("found"), claim.get("seqs"), claim.get("explanation")
        if type(found) is not bool or not isinstance(seqs, list) or not all(is_int(seq) for seq in seqs):
            raise Failure(f"{name}: found or seqs is missing")
        if claim.get("title") != title:
            raise Failure(f"{name}: the title is not {title!r}")
        if not found:
            if seqs:
                raise Failure(f"{name}: a missing scenario lists records")
            if explanation != f"missing: needs {requirement}, from verified signed {environment} data":
                raise Failure(f"{name}: the explanation of a missing scenario is not what it needs")
            missing.append(name)
            continue
        for seq in seqs:
            if seq not in by_seq:
                raise Failure(f"{name}: record {seq} is not in the file")
        if explain(name, [by_seq[seq] for seq in seqs], environment) != explanation:
            raise Failure(f"{name}: the explanation is not what the records show")
        used.update(seqs)
    if used != set(by_seq):
        raise Failure("the file holds records no scenario uses")
    if bundle.get("missing") != missing or bundle.get("complete") is not (not missing):
        raise Failure("missing and complete do not match the scenarios")
    return {"records": len(records), "missing": missing, "complete": not missing, "environment": environment}


def verify(data, key):
    bundle = parse_canonical(data)
    label = LABELS.get(bundle.get("format"))
    if label is None:
        raise Failure(f"unknown format {bundle.get('format')!r}")
    if raw_public_key(bundle.get("publicKey")) != key:
        raise Failure("the file embeds another public key")
    signature = bundle.get("bundleSignature")
    member = b'"bundleSignature":' + json.dumps(signature).encode() + b","
    if not isinstance(signature, str) or not data.startswith(b"{" + member):
        raise Failure("bundleSignature is not the first member")
    signed = label + b"{" + data[len(member) + 1 : -1]
    if not ed25519_verify(key, signed, b64(signature)):
        raise Failure("the file signature does not verify")
    size, root = verify_checkpoint(bundle.get("checkpoint"), key)
    summary = {"verified": True, "format": bundle["format"], "checkpointSize": size}
    if bundle["format"] == "ownership-ledger-evidence/v1":
        summary.update(verify_evidence(bundle, size, root))
    else:
        summary.update(verify_dispute(bundle, size, root))
    return summary


def decode_lines(lines):
    """--decode: each input line "SEQ BASE64" gives one output line, the record's canonical JSON or
    "error: REASON" (the test suite compares them with the ledger's own decoding)."""
    for line in lines:
        seq, _, text = line.strip().partition(" ")
        try:
            print(canonical(decode_record(base64.b64decode(text, validate=True), int(seq)).json).decode())
        except DecodingError as error:
            print(f"error: {error}")


def main():
    if sys.argv[1:] == ["--decode"]:
        decode_lines(sys.stdin)
        return 0
    if len(sys.argv) != 3:
        print("usage: verify_bundle.py FILE PUBLIC_KEY_PEM | verify_bundle.py --decode", file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as handle:
        data = handle.read()
    with open(sys.argv[2]) as handle:
        key = raw_public_key(handle.read())
    try:
        print(json.dumps(verify(data, key), sort_keys=True))
        return 0
    except (Failure, KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as error:
        print(json.dumps({"verified": False, "error": f"{type(error).__name__}: {error}"}, sort_keys=True))
        return 1


if __name__ == "__main__":
    sys.exit(main())
