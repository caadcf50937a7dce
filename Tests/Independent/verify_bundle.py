#!/usr/bin/env python3
"""An independent verifier of the ledger's signed files, written from docs/forensics.md and
docs/storage-format.md alone, with the Python standard library only (no code of the ledger).

    python3 verify_bundle.py FILE PUBLIC_KEY_PEM

FILE is a dispute bundle (ownership-ledger-dispute/v2) or a release evidence file
(ownership-ledger-evidence/v1). It checks:

- the file is one line of JSON ending in one newline, its "format" is known;
- the embedded "publicKey" is the key given;
- the file signature: Ed25519 over the format's label and the file's bytes without the final
  newline and without the "bundleSignature" member (which sorts first, so it is the first member);
- the checkpoint: a C2SP signed note whose origin is "ownership-ledger/" + the first 8 hex digits of
  SHA-256(raw public key), signed under that origin as key name with key hash
  SHA-256(name || 0x0A || 0x01 || raw key)[:4];
- each record: its inclusion proof (RFC 6962 / RFC 9162 2.1.3.2) from SHA-256(0x00 || stored bytes)
  to the checkpoint's root, at leaf seq - 1 of a tree of the checkpoint's size; the header of its
  stored bytes (format byte 2, u48 recordedAt, 16-byte command, zigzag varint at - recordedAt,
  varint attempt) equals its decoded "record"; a withheld record's leaf hash has a valid proof;
- an evidence file: every scenario's seqs name records in the file, "missing" lists the scenarios
  not found, and every transaction in the instances' decoded records is verified-jws from the file's
  environment.

Prints a JSON summary; exits 0 when everything holds, 1 otherwise. Ed25519 verification is RFC 8032's
reference algorithm (slow, and fine for a few signatures).
"""
import base64
import calendar
import datetime
import hashlib
import json
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
    try:
        return base64.b64decode(text, validate=True)
    except Exception as error:
        raise Failure(f"not base64: {text[:40]!r}") from error


def raw_public_key(pem):
    lines = [line for line in pem.strip().splitlines() if not line.startswith("-----")]
    der = b64("".join(lines))
    prefix = bytes.fromhex("302a300506032b6570032100")  # SubjectPublicKeyInfo of an Ed25519 key
    if len(der) != 44 or not der.startswith(prefix):
        raise Failure("the public key is not an Ed25519 SubjectPublicKeyInfo PEM")
    return der[12:]


def verify_checkpoint(text, key):
    note = text.encode()
    body_end = note.find(b"\n\n")
    if body_end < 0:
        raise Failure("checkpoint: no blank line before the signatures")
    body = note[: body_end + 1]
    lines = body.decode().split("\n")[:-1]
    if len(lines) < 3:
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


def milliseconds(text):
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return calendar.timegm(moment.timetuple()) * 1000 + moment.microsecond // 1000


def varint(data, position):
    value, shift = 0, 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


def check_header(stored, record, seq):
    if stored[0] != 2 or len(stored) < 23:
        raise Failure(f"record {seq}: not a storage-format-2 record")
    recorded_at = int.from_bytes(stored[1:7], "big")
    zigzag, position = varint(stored, 23)
    at = recorded_at + ((zigzag >> 1) ^ -(zigzag & 1))
    attempt, _ = varint(stored, position)
    header = (record.get("seq"), milliseconds(record["recordedAt"]), milliseconds(record["at"]), record["command"], record["attempt"])
    if header != (seq, recorded_at, at, stored[7:23].hex(), attempt):
        raise Failure(f"record {seq}: the decoded header does not match the stored bytes")


def verify(data, key):
    if not data.endswith(b"\n") or data.count(b"\n") != 1:
        raise Failure("the file is not one line ending in a newline")
    bundle = json.loads(data)
    label = LABELS.get(bundle.get("format"))
    if label is None:
        raise Failure(f"unknown format {bundle.get('format')!r}")
    if raw_public_key(bundle["publicKey"]) != key:
        raise Failure("the file embeds another public key")
    member = b'"bundleSignature":' + json.dumps(bundle["bundleSignature"]).encode() + b","
    if not data.startswith(b"{" + member):
        raise Failure("bundleSignature is not the first member")
    signed = label + b"{" + data[len(member) + 1 : -1]
    if not ed25519_verify(key, signed, b64(bundle["bundleSignature"])):
        raise Failure("the file signature does not verify")
    size, root = verify_checkpoint(bundle["checkpoint"], key)
    seqs = []
    for entry in bundle["records"]:
        seq = entry["seq"]
        proof = [b64(sibling) for sibling in entry["inclusionProof"]]
        if "withheld" in entry:
            leaf = b64(entry["leafHash"])
        else:
            stored = b64(entry["stored"])
            leaf = sha256(b"\x00", stored)
            check_header(stored, entry["record"], seq)
        if not verify_inclusion(seq - 1, size, leaf, proof, root):
            raise Failure(f"record {seq}: the inclusion proof does not lead to the checkpoint's root")
        seqs.append(seq)
    summary = {"verified": True, "format": bundle["format"], "checkpointSize": size, "records": len(seqs)}
    if bundle["format"] == "ownership-ledger-evidence/v1":
        records = {entry["seq"]: entry["record"] for entry in bundle["records"]}
        missing = []
        for claim in bundle["scenarios"]:
            if not claim["found"]:
                missing.append(claim["scenario"])
                continue
            for seq in claim["seqs"]:
                if seq not in records:
                    raise Failure(f"{claim['scenario']}: record {seq} is not in the file")
                for event in records[seq]["events"]:
                    transaction = event.get("transaction")
                    if transaction and (transaction["provenance"] != "verified-jws" or transaction["environment"] != bundle["environment"]):
                        raise Failure(f"{claim['scenario']}: record {seq} is not verified signed {bundle['environment']} data")
        if missing != bundle["missing"] or bundle["complete"] != (not missing):
            raise Failure("missing and complete do not match the scenarios")
        summary["missing"] = missing
    return summary


def main():
    if len(sys.argv) != 3:
        print("usage: verify_bundle.py FILE PUBLIC_KEY_PEM", file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as handle:
        data = handle.read()
    with open(sys.argv[2]) as handle:
        key = raw_public_key(handle.read())
    try:
        print(json.dumps(verify(data, key), sort_keys=True))
        return 0
    except (Failure, KeyError, TypeError, ValueError, IndexError) as error:
        print(json.dumps({"verified": False, "error": f"{type(error).__name__}: {error}"}, sort_keys=True))
        return 1


if __name__ == "__main__":
    sys.exit(main())
