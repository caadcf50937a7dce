import AppleSignedData
import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import OwnershipLedger

struct InitCommand: Subcommand {
    static let name = "init"
    static let abstract = "Create a ledger: store, key file and the app it accepts signed data for."
    static let usage = """
        Usage: ledger init --bundle-id ID --environment Production|Sandbox [--app-apple-id N]
                           [--root-certificate FILE]... [--allow-local-testing]
                           [--admin ID --admin-public-key FILE] [--store DIR] [--keys KEYDIR]

        Creates DIR (default ./ledger-data) holding the LMDB files, and the key files ledger.key and
        ledger-signing.key (mode 0600; back them up: without ledger.key no lineage or account can be looked
        up) in KEYDIR: --keys, else LEDGER_KEYS, else DIR itself. Keep them outside DIR when people or
        backups that may read the data must not read the keys (docs/keys.md); every later command then
        needs the same --keys (or LEDGER_KEYS); with the keys in DIR, init warns on standard error. A KEYDIR that
        already holds key files is refused. Signed data is accepted only from the bundle
        and environment given; --app-apple-id is required for Production. The trusted root defaults to
        Apple Root CA - G3; --root-certificate (DER or PEM, repeatable) replaces it (e.g. a test root).
        --allow-local-testing also permits --environment Xcode or LocalTesting (no signatures: development only).
        --admin enrols the first support-roster administrator with the Ed25519 public key in FILE (from
        `ledger support keygen`); every later roster change is signed by an administrator (docs/support-recovery.md).
        """
    static let repeatable: Set<String> = ["root-certificate"]
    static let options: Set<String> = ["bundle-id", "environment", "app-apple-id", "root-certificate", "admin", "admin-public-key"]
    static let flags: Set<String> = ["allow-local-testing"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let bundleId = try arguments.required("bundle-id")
        guard let environment = try arguments.environment() else { throw CLIError.usage("--environment is required") }
        var appAppleId: Int64?
        if let text = arguments.value("app-apple-id") {
            guard let id = Int64(text) else { throw CLIError.usage("--app-apple-id \(text) is not a number") }
            appAppleId = id
        }
        let roots = try arguments.values("root-certificate").map(readCertificate)
        let configuration = LedgerConfiguration(
            bundleId: bundleId, environment: environment, appAppleId: appAppleId, rootCertificates: roots,
            allowLocalTesting: arguments.flags.contains("allow-local-testing"))
        do {
            _ = try configuration.verifier()
        } catch {
            throw CLIError.usage(error.message)
        }
        var administrator: (id: String, publicKey: Ed25519PublicKey)?
        if let admin = arguments.value("admin") {
            do {
                try Ledger.checkIdentifier(admin, field: .administrator)
            } catch let error as SupportInputError {
                throw CLIError.usage("--admin: \(error)")
            }
            administrator = (admin, try KeyFiles.publicKey(try arguments.required("admin-public-key"), option: "admin-public-key"))
        } else if arguments.value("admin-public-key") != nil {
            throw CLIError.usage("--admin-public-key needs --admin ID")
        }
        let location = try arguments.location()
        if let directory = location.dataDirectory {
            try prepareDirectory(directory, option: arguments.value("store") == nil ? "the default store" : "--store")
        }
        if location.dataDirectory != location.keyDirectory {
            try prepareDirectory(location.keyDirectory, option: arguments.value("keys") == nil ? StoreLocation.keysVariable : "--keys")
        }
        let ledger = try Ledger.initialize(at: location, configuration: configuration, administrator: administrator)
        if let directory = location.dataDirectory { warnIfKeysBesideData(store: directory, keys: location.keyDirectory, console: console) }
        console.out(
            JSONLine.render([
                "store": location.description, "keyFile": ledger.store.keyDirectory.appendingPathComponent(LedgerKeys.fileName).path,
                "signingKeyFile": ledger.store.signingKeyURL.path,
                "bundleId": bundleId, "environment": environment.rawValue,
                "trustedRoots": roots.isEmpty ? ["Apple Root CA - G3"] : arguments.values("root-certificate"),
                "administrator": administrator?.id ?? NSNull(),
            ]))
        return .success
    }

    /// Creates `directory` (mode 0700, with its missing parents) unless it exists. A store error (exit 3)
    /// with the reason when it exists and is not a writable directory, or cannot be created.
    static func prepareDirectory(_ directory: URL, option: String) throws {
        let path = directory.standardizedFileURL.path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw CLIError(code: .storeError, message: "\(option) \(path) exists and is not a directory; choose another --store directory")
            }
            guard access(path, W_OK | X_OK) == 0 else {
                throw CLIError(code: .storeError, message: "cannot create the ledger in \(option) \(path): \(String(cString: strerror(errno)))")
            }
            return
        }
        do {
            try FileAccess.createDirectories(directory)
        } catch LedgerStoreError.fileAccess(let failed, _, let code) {
            let reason = code == ENOTDIR ? "\(failed) is not a directory" : "\(failed): \(String(cString: strerror(code)))"
            throw CLIError(code: .storeError, message: "cannot create \(option) \(path): \(reason)")
        }
    }

    static func readCertificate(_ path: String) throws -> Data {
        let data = try readFile(path, option: "--root-certificate")
        let text = String(decoding: data, as: UTF8.self)
        guard text.contains("-----BEGIN CERTIFICATE-----") else { return data }
        let body = text.components(separatedBy: "\n").filter { !$0.hasPrefix("-----") }.joined()
        guard let der = Data(base64Encoded: body) else { throw CLIError.usage("--root-certificate \(path) is not valid PEM") }
        return der
    }
}

struct LogCommand: Subcommand {
    static let name = "log"
    static let abstract = "Print records as JSON lines."
    static let usage = """
        Usage: ledger log [--from SEQ] [--limit N] [--store DIR]

        Prints each record as one JSON object per line, from sequence SEQ (default 1), at most N records
        (default all): seq, recordedAt (the ledger's clock), at (the business time of the attempt), command
        (its idempotency key), attempt, and events (fact first, effects, decision last). Accounts appear as
        pseudonyms, lineages as keyed hashes.
        """
    static let options: Set<String> = ["from", "limit"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let store = try openStore(arguments)
        let from = UInt64(try arguments.integer("from") ?? 1)
        let limit = try arguments.integer("limit") ?? .max
        var printed = 0
        guard limit > 0 else { return .success }
        try store.read { reader in
            try reader.forEachRecord(from: max(from, 1), through: .max) { sequence, bytes in
                console.out(JSONLine.render(RecordJSON.render(try RecordCodec.decode(bytes, sequence: sequence))))
                printed += 1
                return printed < limit
            }
        }
        return .success
    }
}

struct VerifyCommand: Subcommand {
    static let name = "verify"
    static let abstract = "Check the hash chain, every invariant, the persisted read models, the indexes and the identity vault."
    static let usage = """
        Usage: ledger verify [--checkpoint FILE [--public-key KEY] [--format-one-store OLD]] [--store DIR]

        Replays the whole log once, in memory that does not grow with the store: every record's
        bytes, order and time, its leaf and chain hash against the head, the stored Merkle nodes; every
        invariant of docs/events.md; the persisted read models against a fresh replay; and the
        commands, lineages, account-lineages and merkle indexes against the entries the log implies.
        Then the identity vault, which is outside the hash chain, against itself: every UID's entry
        must point to the account whose sealed UID is that UID, and every sealed UID must be pointed
        to by exactly one entry (vaultDifferences, naming pseudonyms, never a UID); a UID sealed
        since session 28 is bound to its pseudonym and fails there when moved; legacySealedUIDs
        counts the entries whose UID was sealed by an earlier build, unbound, which only that
        consistency check protects (docs/storage-format.md, "The identity vault").
        Prints a JSON report (events, readModelDifferences, indexDifferences, vaultDifferences: at most
        100 lines each, then "… and N more"; formatOneHistory: support steps an upgrade copied from storage format 1
        without the signatures format 2 requires, which are not violations). Exit 0 only when all hold;
        1 otherwise, with the first and last bad sequence numbers when the chain is broken (`ledger
        rebuild` repairs read models and indexes). Shows progress on a terminal: the log's records,
        then the accounts the vault check has checked.
        --checkpoint also checks a signed checkpoint (`ledger checkpoint`): its signature (store's signing
        key, or KEY), the root of its first SIZE records, a consistency proof to today's log, and the
        projection state hash of a replay of those records (docs/forensics.md).
        For a store made by `ledger upgrade`, a checkpoint signed over the format-1 log proves that log
        only: it verifies (formatOneCopies "match") only with --format-one-store OLD, the format-1 store
        the upgrade left unchanged, against which every copied record is checked; without it, exit 1
        (formatOneCopies "not-checked").
        """
    static let options: Set<String> = ["checkpoint", "public-key", "format-one-store"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        if arguments.value("public-key") != nil && arguments.value("checkpoint") == nil {
            throw CLIError.usage("--public-key needs --checkpoint FILE: it is the key that checks the checkpoint's signature")
        }
        if arguments.value("format-one-store") != nil && arguments.value("checkpoint") == nil {
            throw CLIError.usage(
                "--format-one-store needs --checkpoint FILE: it is the format-1 store a format-1 checkpoint of an upgraded store is checked against")
        }
        // One LMDB environment per process: with --checkpoint the ledger's own store is used.
        let ledger = arguments.value("checkpoint") == nil ? nil : try openLedger(arguments)
        let store = try ledger?.store ?? openStore(arguments)
        let checkpoint = try ledger.flatMap { try CheckpointVerification.run($0, arguments: arguments) }
        let report = try store.replay(
            progress: Progress.reporter(console: console, label: "verify"),
            vaultProgress: Progress.reporter(console: console, label: "verify: identity vault", unit: "accounts"))
        var object: JSONObject = [
            "intact": report.isIntact, "verifiedRecords": report.verifiedRecords, "events": report.events,
            "invariantViolations": report.violations.map { ["invariant": $0.invariant, "seq": $0.sequence, "message": $0.message] },
            "readModelDifferences": report.readModelDifferences, "indexDifferences": report.indexDifferences,
            "vaultDifferences": report.vaultDifferences, "legacySealedUIDs": report.legacySealedUIDs ?? 0,
            "formatOneHistory": report.formatOneNotes.map { ["seq": $0.sequence, "message": $0.message] },
        ]
        if let fault = report.chainFault {
            object["firstBadSeq"] = fault.sequence
            object["lastBadSeq"] = fault.through
            object["chainFault"] = fault.description
        }
        if let (checked, verified) = checkpoint {
            object["checkpoint"] = checked
            if !verified { object["intact"] = false }
            if object["firstBadSeq"] == nil, let bad = checked["firstBadSeq"] { object["firstBadSeq"] = bad }
        }
        console.out(JSONLine.render(object))
        return report.isIntact && checkpoint?.1 != false ? .success : .verificationFailed
    }
}

struct RebuildCommand: Subcommand {
    static let name = "rebuild"
    static let abstract = "Recompute the read models and indexes from the log alone and report differences."
    static let usage = """
        Usage: ledger rebuild [--check] [--store DIR]

        Replays the log through the projections (one streaming pass, as verify) and compares the result
        with the persisted read models (differences), and the commands, lineages, account-lineages and
        merkle indexes with the entries the log implies (indexDifferences, at most 100 lines then
        "… and N more"), then makes the read models and the indexes equal to the log's, in write
        groups of at most 10,000 changes (with --check it only compares). The identity vault cannot be
        derived from the log and is never changed. Shows progress on a terminal. Prints {"records",
        "events", "lineages", "differences", "indexDifferences", "repaired"}. Exit 1 when the log
        itself is broken.
        """
    static let options: Set<String> = []
    static let flags: Set<String> = ["check"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let store = try openStore(arguments)
        let report = try store.rebuildReadModels(
            repair: !arguments.flags.contains("check"), progress: Progress.reporter(console: console, label: "rebuild"))
        var object: JSONObject = [
            "records": report.verifiedRecords, "differences": report.readModelDifferences,
            "indexDifferences": report.indexDifferences,
            "repaired": !arguments.flags.contains("check") && !(report.readModelDifferences.isEmpty && report.indexDifferences.isEmpty),
            "lineages": report.lineages, "events": report.events,
        ]
        if let fault = report.chainFault { object["chainFault"] = fault.description }
        console.out(JSONLine.render(object))
        return report.chainFault == nil ? .success : .verificationFailed
    }
}

struct StatsCommand: Subcommand {
    static let name = "stats"
    static let abstract = "Counts, head and sizes."
    static let usage = """
        Usage: ledger stats [--store DIR]

        Prints record count, head sequence and hash, per-database entries and bytes, and the size of
        data.mdb (dataFileBytes) or, for PostgreSQL, of the ledger's tables with their indexes (databaseBytes).
        """
    static let options: Set<String> = []

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let store = try openStore(arguments)
        let (head, databases) = try store.read { reader in (try reader.head(), try reader.statistics()) }
        var object: JSONObject = [
            "records": head.sequence, "headSeq": head.sequence, "headHash": head.chainHash.hex,
            "headRecordedAt": head.sequence == 0 ? NSNull() : LedgerTime.format(head.recordedAt),
            "formatVersion": Int(store.formatVersion),
            "databases": Dictionary(uniqueKeysWithValues: databases.map { ($0.name, ["entries": $0.entries, "bytes": $0.bytes]) }),
        ]
        if case .directory(let directory, _) = store.location {
            object["dataFileBytes"] = try FileAccess.size(directory.appendingPathComponent("data.mdb").path)
        } else {
            object["databaseBytes"] = databases.reduce(0) { $0.addingReportingOverflow($1.bytes).overflow ? .max : $0 + $1.bytes }
        }
        console.out(JSONLine.render(object))
        return .success
    }
}

/// Progress lines on standard error, only when it is a terminal.
enum Progress {
    static func reporter(console: Console, label: String, unit: String = "records") -> ((UInt64, UInt64) -> Void)? {
        guard isatty(STDERR_FILENO) == 1 else { return nil }
        return { done, total in
            let percent = total == 0 ? 100 : Int(done * 100 / total)
            console.progress("\r\(label): \(done)/\(total) \(unit) (\(percent)%)\(done == total ? "\n" : "")")
        }
    }

    /// Progress of work in stages, one line per stage ("backup: verify: 10/20 records (50%)"), counted
    /// in `units[stage]`; only when standard error is a terminal.
    static func stages(label: String, units: [String: String]) -> ((String, UInt64, UInt64) -> Void)? {
        guard isatty(STDERR_FILENO) == 1 else { return nil }
        return { stage, done, total in
            let percent = total == 0 ? 100 : Int(min(done, total) * 100 / total)
            let line = "\r\(label): \(stage): \(done)/\(total) \(units[stage] ?? "") (\(percent)%)\(done >= total ? "\n" : "")"
            Console().progress(line)
        }
    }
}
