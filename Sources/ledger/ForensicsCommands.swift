import AppleSignedData
import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import OwnershipLedger

/// Writes `data` to the output file `path` (mode 0600), or fails naming it and why: a path that cannot be
/// written (`Is a directory (EISDIR)`, a missing directory), a symbolic link or a path in `ledger`'s store or
/// key directory is a usage error, a device that fails the write (a full disk, an I/O error) a store error (exit 3).
func writeFile(_ data: Data, to path: String, sparing ledger: Ledger) throws {
    let location = ledger.store.location
    do {
        try FileAccess.writeFile(path, contents: [UInt8](data), protecting: [location.dataDirectory, location.keyDirectory].compactMap { $0 })
    } catch let error as LedgerStoreError {
        if case .fileAccess(_, _, let code) = error, [ENOSPC, EDQUOT, EIO, EROFS].contains(code) {
            throw CLIError(code: .storeError, message: "\(error)")
        }
        throw CLIError.usage("\(error)")
    }
}

/// The content of the input file `path` given as `option` (at most 256 MiB), or a usage error saying why
/// it cannot be read (a permission error as such, naming the path).
func readFile(_ path: String, option: String) throws -> Data {
    do {
        return Data(try FileAccess.read(path, limit: 256 << 20))
    } catch let error as LedgerStoreError {
        throw CLIError.usage("\(option): \(error)")
    }
}

/// One timeline step as a JSON object.
func render(_ step: Forensics.Step) -> JSONObject {
    var object: JSONObject = [
        "seq": step.firstSequence, "seqs": step.sequences, "time": LedgerTime.format(step.recordedAt), "at": LedgerTime.format(step.at),
        "event": step.event,
        "what": step.what, "why": step.why, "effects": step.effects, "entitled": step.entitledAfter,
        "decision": step.decision?.outcome.rawValue ?? NSNull(), "code": step.decision?.code ?? NSNull(),
        "message": step.decision?.message ?? NSNull(), "decisionSeq": step.decisionSequence ?? NSNull(),
    ]
    switch step.state.binding {
    case .unbound:
        object["binding"] = "unbound"
        object["account"] = NSNull()
    case .bound(let account):
        object["binding"] = "bound"
        object["account"] = account.description
    case .tombstoned(let former):
        object["binding"] = "tombstoned"
        object["account"] = NSNull()
        object["formerAccount"] = former.description
    }
    if let e = step.state.entitlement {
        var entitlement: JSONObject = [
            "account": e.account.description, "productId": e.productId, "expiresAt": e.expiresAt.map(LedgerTime.format) ?? NSNull(),
            "revoked": e.revokedAt != nil, "active": step.entitledAfter,
        ]
        if let ended = e.endedBecause { entitlement["ended"] = ended.name }
        object["entitlement"] = entitlement
    } else {
        object["entitlement"] = NSNull()
    }
    return object
}

/// The timeline as aligned text: one line per step.
func renderText(_ steps: [Forensics.Step]) -> [String] {
    func pad(_ text: String, _ width: Int) -> String { text.padding(toLength: max(width, text.count), withPad: " ", startingAt: 0) }
    var lines = [
        pad("SEQ", 11) + "  " + pad("TIME", 24) + "  " + pad("DECISION", 9) + "  " + pad("BINDING", 20) + "  " + pad("ENTITLED", 8)
            + "  WHAT / WHY"
    ]
    for step in steps {
        let seqs = step.sequences.count > 1 ? "\(step.firstSequence)-\(step.sequences.last ?? 0)" : "\(step.firstSequence)"
        let binding: String
        switch step.state.binding {
        case .unbound: binding = "unbound"
        case .bound(let account): binding = "bound " + account.shortDescription
        case .tombstoned(let account): binding = "tombstone " + account.shortDescription
        }
        lines.append(
            pad(seqs, 11) + "  " + pad(LedgerTime.format(step.recordedAt), 24) + "  " + pad(step.decision?.outcome.rawValue ?? "-", 9)
                + "  " + pad(binding, 20) + "  " + pad(step.entitledAfter ? "yes" : "no", 8) + "  " + step.what + " / " + step.why)
    }
    return lines
}

struct ReplayCommand: Subcommand {
    static let name = "replay"
    static let abstract = "A lineage's timeline: each decision, why, and the state after it."
    static let usage = """
        Usage: ledger replay --original-transaction-id ID [--environment E] [--until SEQ|TIME] [--text] [--store DIR]

        Replays the lineage's records (found through the lineage index, with the fact and decision of each
        batch) and prints one JSON object per step: seq, seqs, time, event, what, decision, code, message,
        why, effects, then the state after the step: binding (unbound|bound|tombstoned), account (pseudonym),
        entitlement and entitled (active at the step's time). --until stops after a sequence number (a plain
        integer) or a time (ISO-8601, inclusive); a step is one record, so it never cuts one. --text prints
        aligned columns instead. Accounts appear as pseudonyms, as stored. A lineage the ledger has no record
        of prints no step, a note on stderr, and exits 0 (an empty history; docs/output.md). See docs/forensics.md.
        """
    static let options: Set<String> = ["original-transaction-id", "environment", "until"]
    static let flags: Set<String> = ["text"]

    static func limit(_ arguments: Arguments) throws -> Forensics.Limit? {
        guard let text = arguments.value("until") else { return nil }
        // Digits only: `+5` or ` 5` is refused, not read as 5 (a sign reads as a time's typo).
        if text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let sequence = UInt64(text) {
            return .sequence(sequence)
        }
        guard let time = LedgerTime.parse(text) else {
            throw CLIError.usage("--until \(text) is neither a sequence number nor an ISO-8601 time (2026-11-29T12:00:00Z)")
        }
        return .time(time)
    }

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let steps = try ledger.replayLineage(
            originalTransactionId: try arguments.originalTransactionId() ?? "", environment: try arguments.environment(),
            until: try limit(arguments))
        if steps.isEmpty {
            console.err(
                arguments.value("until") == nil
                    ? "no records of this lineage (check --environment and the id)"
                    : "no records of this lineage up to --until \(arguments.value("until") ?? "") (check it, --environment and the id)")
        }
        if arguments.flags.contains("text") {
            renderText(steps).forEach(console.out)
        } else {
            for step in steps { console.out(JSONLine.render(render(step))) }
        }
        return .success
    }
}

struct ExplainCommand: Subcommand {
    static let name = "explain"
    static let abstract = "Why an account is or is not entitled to a lineage, citing sequence numbers."
    static let usage = """
        Usage: ledger explain --uid UID --original-transaction-id ID [--environment E] [--at TIME] [--store DIR]

        Replays the lineage up to --at (default now) and prints {"verdict", "entitled", "explanation",
        "citedSequences", "binding", ...}. Verdicts: entitled, denied (bound to another account), tombstoned,
        transferred, expired, revoked, ended, not-bound, not-entitled, never-seen. A deleted account's UID is
        unknown (its mapping was erased): the explanation then says so and describes the lineage.
        """
    static let options: Set<String> = ["uid", "original-transaction-id", "environment", "at"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let uid = try arguments.required("uid")
        let id = try arguments.originalTransactionId() ?? ""
        let environment = try arguments.environment()
        let given = try arguments.time("at")
        let at = given ?? LedgerTime.now()
        let explanation = try ledger.explain(uid: uid, originalTransactionId: id, environment: environment, at: given)
        let binding: String
        switch explanation.state.binding {
        case .unbound: binding = "unbound"
        case .bound: binding = "bound"
        case .tombstoned: binding = "tombstoned"
        }
        console.out(
            JSONLine.render([
                "uid": uid, "originalTransactionId": id, "environment": (environment ?? ledger.configuration.environment).rawValue,
                "at": LedgerTime.format(at), "verdict": explanation.verdict.rawValue, "entitled": explanation.entitled,
                "explanation": explanation.text, "citedSequences": explanation.cited, "binding": binding,
            ]))
        return .success
    }
}

struct CheckpointCommand: Subcommand {
    static let name = "checkpoint"
    static let abstract = "Sign a checkpoint of the log (size, Merkle root, projection state hash)."
    static let usage = """
        Usage: ledger checkpoint [--out FILE] [--public-key-out FILE] [--store DIR]

        Signs, with the ledger signing key (ledger-signing.key, created if missing), a checkpoint in the
        C2SP signed-note format: origin (ownership-ledger/<key id>), size, the RFC 6962 root over the stored
        record bytes, and "projection state v<N> <sha256>" of a fresh replay. Prints it, or writes it to
        FILE and prints a JSON summary. --public-key-out also writes the public key (PEM). Keep checkpoints
        outside the ledger; check them later with `ledger verify --checkpoint FILE`.
        """
    static let options: Set<String> = ["out", "public-key-out"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let (text, checkpoint) = try ledger.makeCheckpoint()
        if let path = arguments.value("public-key-out") {
            try writeFile(Data(try ledger.signer().publicKey.pem.utf8), to: path, sparing: ledger)
        }
        guard let out = arguments.value("out") else {
            console.write(Array(text.utf8))
            return .success
        }
        try writeFile(Data(text.utf8), to: out, sparing: ledger)
        console.out(
            JSONLine.render([
                "out": out, "origin": checkpoint.origin, "size": checkpoint.size, "root": Data(checkpoint.rootHash).base64EncodedString(),
                "extensions": checkpoint.extensions,
            ]))
        return .success
    }
}

struct SigningKeyCommand: Subcommand {
    static let name = "signing-key"
    static let abstract = "Print the ledger's signing public key (PEM) for offline verification."
    static let usage = """
        Usage: ledger signing-key [--out FILE] [--store DIR]

        Prints (or writes to FILE) the Ed25519 public key that signs checkpoints and dispute bundles, as
        SubjectPublicKeyInfo PEM. Creates the signing key (ledger-signing.key, mode 0600) if the store has none.
        Publish it through a channel other than the bundles it verifies.
        """
    static let options: Set<String> = ["out"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let pem = try ledger.signer().publicKey.pem
        if let out = arguments.value("out") {
            try writeFile(Data(pem.utf8), to: out, sparing: ledger)
        } else {
            console.write(Array(pem.utf8))
        }
        return .success
    }
}

struct DisputeCommand: Subcommand {
    static let name = "dispute"
    static let abstract = "Export a lineage's verifiable dispute bundle, or verify one offline."
    static let usage = """
        Usage: ledger dispute export --original-transaction-id ID --out FILE [--environment E] [--uid UID]
                                     [--withhold-private] [--store DIR]
               ledger dispute verify FILE --public-key KEY

        export: signs a checkpoint of the whole log now and writes one canonical JSON file with the lineage's
        records (stored bytes in base64 and decoded JSON), an RFC 6962 inclusion proof of each against that
        checkpoint, the checkpoint and the signing public key; the file itself is signed too. Accounts appear
        as pseudonyms; --uid names the requesting account's pseudonym (that UID only). --withhold-private
        replaces transfer requests and refusals (staff-private reason and evidence) by their leaf hash and proof.
        verify: needs no store. Checks the checkpoint signature with KEY (PEM, from `ledger signing-key`), the
        bundle signature, each record's hash and inclusion proof, and that each decoded JSON matches its bytes;
        prints the proven timeline as JSON lines, then {"verified": true, ...}. Exit 1 if anything fails.
        """
    static let positionals = 1...2
    static let options: Set<String> = ["original-transaction-id", "environment", "out", "uid", "public-key"]
    static let flags: Set<String> = ["withhold-private"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let exportOnly = ["original-transaction-id", "environment", "out", "uid", "withhold-private"]
        switch arguments.positionals.first {
        case "export":
            if arguments.value("public-key") != nil { throw CLIError.usage("--public-key belongs to `dispute verify`") }
            return try export(arguments, console: console)
        case "verify":
            if let given = exportOnly.first(where: { arguments.value($0) != nil || arguments.flags.contains($0) }) {
                throw CLIError.usage("--\(given) belongs to `dispute export` (`dispute verify` needs only FILE and --public-key)")
            }
            return try verify(arguments, console: console)
        default: throw CLIError.usage("give export or verify")
        }
    }

    static func export(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let out = try arguments.required("out")
        let id = try arguments.originalTransactionId() ?? ""
        guard !(try ledger.lineageRecords(originalTransactionId: id, environment: try arguments.environment()).records.isEmpty) else {
            throw CLIError.usage("the ledger has no record of original transaction \(id) in this environment (check --environment)")
        }
        let data: Data
        do {
            data = try ledger.exportDispute(
                originalTransactionId: id, environment: try arguments.environment(), requestingUID: arguments.value("uid"),
                withholdPrivate: arguments.flags.contains("withhold-private"))
        } catch let failure as DisputeBundle.Failure {
            throw CLIError.usage(failure.message)
        }
        try writeFile(data, to: out, sparing: ledger)
        let summary = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
        console.out(
            JSONLine.render([
                "out": out, "records": (summary["records"] as? [Any])?.count ?? 0, "lineage": summary["lineage"] ?? NSNull(),
                "bytes": data.count,
            ]))
        return .success
    }

    static func verify(_ arguments: Arguments, console: Console) throws -> ExitCode {
        guard arguments.positionals.count == 2 else { throw CLIError.usage("give exactly one bundle FILE") }
        let data = try readFile(arguments.positionals[1], option: "the bundle")
        let key = try KeyFiles.publicKey(try arguments.required("public-key"), option: "public-key")
        do {
            let verified = try DisputeBundle.verify(data, publicKey: key)
            for step in verified.timeline { console.out(JSONLine.render(render(step))) }
            var summary: JSONObject = [
                "verified": true, "origin": verified.origin, "checkpointSize": verified.checkpointSize,
                "lineage": verified.lineage.description, "records": verified.shownRecords, "subject": verified.subject,
            ]
            if let account = verified.requestingAccount { summary["requestingAccount"] = account.description }
            if !verified.withheld.isEmpty { summary["withheld"] = verified.withheld }
            console.out(JSONLine.render(summary))
            return .success
        } catch let failure as DisputeBundle.Failure {
            console.out(JSONLine.render(["verified": false, "error": failure.message]))
            return .verificationFailed
        }
    }
}

/// The `--checkpoint` part of `ledger verify`.
enum CheckpointVerification {
    static func run(_ ledger: Ledger, arguments: Arguments) throws -> (JSONObject, Bool)? {
        guard let path = arguments.value("checkpoint") else { return nil }
        let text = String(decoding: try readFile(path, option: "--checkpoint"), as: UTF8.self)
        let key = try arguments.value("public-key").map { try KeyFiles.publicKey($0, option: "public-key") }
        let formatOneStore = arguments.value("format-one-store").map { URL(fileURLWithPath: $0) }
        let report: CheckpointReport
        do {
            report = try ledger.verifyCheckpoint(text, publicKey: key, formatOneStore: formatOneStore)
        } catch let error as CheckpointError {
            return (["verified": false, "problems": ["\(error)"]], false)
        }
        var object: JSONObject = [
            "verified": report.verified, "origin": report.origin, "size": report.size, "logSize": report.logSize,
            "signatureVerified": report.signatureVerified, "root": Data(report.rootHash).base64EncodedString(),
            "rootMatches": report.recomputedRoot == report.rootHash, "formatOneOrigin": report.formatOneOrigin,
            "currentRoot": Data(report.currentRoot).base64EncodedString(),
            "consistent": report.consistent, "consistencyProof": report.consistencyProof.map { Data($0).base64EncodedString() },
            "projections": report.projections.map { check -> JSONObject in
                [
                    "version": Int(check.version), "recorded": check.recorded.hex, "replayed": check.replayed?.hex ?? NSNull(),
                    "status": check.status,
                ]
            },
            "problems": report.problems,
        ]
        if let bad = report.firstBadSeq { object["firstBadSeq"] = bad }
        if let copies = report.formatOneCopies { object["formatOneCopies"] = copies.rawValue }
        return (object, report.verified)
    }
}

/// The demonstration's last part: the disputed lineage's replay, an explanation, and a dispute bundle
/// verified offline (as `ledger replay`, `explain` and `dispute export` / `verify` do).
enum ForensicsDemo {
    static let disputed = "2000000000000002"

    static func run(ledger: Ledger, directory: URL, console: Console) throws {
        console.out("")
        console.out("8. Dispute: the history of lineage \(disputed), and a bundle anyone can check")
        console.out("  ledger replay --original-transaction-id \(disputed) --text")
        let steps = try ledger.replayLineage(originalTransactionId: disputed)
        for line in renderText(steps) { console.out("    " + line) }
        let at = (steps.last?.recordedAt ?? 0) + 60_000
        for uid in ["carol2"] {
            let explanation = try ledger.explain(uid: uid, originalTransactionId: disputed, at: at)
            console.out("  ledger explain --uid \(uid) --original-transaction-id \(disputed) --at \(LedgerTime.format(at))")
            console.out("    \(explanation.verdict.rawValue): \(explanation.text)")
        }
        let bundle = directory.appendingPathComponent("dispute-\(disputed).json")
        let key = directory.appendingPathComponent("ledger-signing.pub")
        try ledger.exportDispute(originalTransactionId: disputed).write(to: bundle)
        try Data(try ledger.signer().publicKey.pem.utf8).write(to: key)
        console.out("  ledger dispute export --original-transaction-id \(disputed) --out \(bundle.path)")
        let verified = try DisputeBundle.verify(
            try Data(contentsOf: bundle), publicKey: try Ed25519PublicKey(pem: String(decoding: try Data(contentsOf: key), as: UTF8.self)))
        console.out("  ledger dispute verify \(bundle.path) --public-key \(key.path)")
        console.out(
            "    verified offline: \(verified.shownRecords) records, each included in checkpoint \(verified.origin) of size "
                + "\(verified.checkpointSize); \(verified.timeline.count) steps")
    }
}
