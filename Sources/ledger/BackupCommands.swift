import Foundation
import LedgerCore
import LedgerStore
import OwnershipLedger

struct BackupCommand: Subcommand {
    static let name = "backup"
    static let abstract = "Copy the store while writers run, verify the copy and sign a checkpoint of it."
    static let usage = """
        Usage: ledger backup --out DIR [--include-keys] [--store DIR|postgres://…] [--keys KEYDIR]

        Copies data.mdb (which holds the log, read models, indexes, identity vault and the app
        configuration) into DIR with LMDB's compacting copy, from one read transaction: writers keep
        running, and the copy holds every record committed before it began. Freed pages are not copied,
        so identities erased before the backup are not in it (docs/operations.md). Then verifies the copy
        as `ledger verify` does (chain, Merkle nodes, invariants, read models, indexes) and writes
        checkpoint.txt: a checkpoint of the copy signed with the ledger's signing key (the live store's,
        with or without --include-keys) whose extra line `backup data.mdb BYTES SHA256` covers the copy's
        exact bytes; and ledger-signing.pub. The key files are copied only with --include-keys (then
        whoever reads the backup can look up and unseal identities: keep it as carefully as the keys).
        DIR is created (mode 0700) or must be an empty directory; every file is mode 0600. A copy that does
        not verify is removed. Progress on a terminal. Prints {"store", "out", "headSeq", "headHash",
        "root", "origin", "checkpoint", "checkpointFile", "dataFileBytes", "dataFileSHA256",
        "keysIncluded", "files", "verifiedRecords", "events", "intact"}. Exit 1 when the copy does not
        verify, 3 when DIR is not empty or the store cannot be opened.
        A PostgreSQL store (--store postgres://… or LEDGER_STORE) is read in one snapshot (REPEATABLE READ:
        writers keep running) and written as a store directory's data.mdb, so the backup is the same kind
        of directory and `ledger restore` makes a store directory of it (`ledger migrate` then moves it into
        PostgreSQL). PostgreSQL's own tools remain the way to back up the database itself (docs/operations.md).
        """
    static let options: Set<String> = ["out"]
    static let flags: Set<String> = ["include-keys"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let out = URL(fileURLWithPath: try arguments.required("out"))
        let location = try arguments.location()
        let ledger = try openLedger(arguments)
        let report = try refusals {
            try Backup.take(
                of: ledger, into: out, includeKeys: arguments.flags.contains("include-keys"),
                progress: Progress.stages(
                    label: "backup", units: ["copy": "bytes", "snapshot": "records", "verify": "records", "identity vault": "accounts"]))
        }
        console.out(
            JSONLine.render([
                "store": location.description, "out": out.path, "headSeq": report.head.sequence, "headHash": report.head.chainHash.hex,
                "root": report.root.hex, "origin": report.origin, "checkpoint": report.checkpoint,
                "checkpointFile": out.appendingPathComponent(Backup.checkpointFileName).path, "dataFileBytes": report.dataBytes,
                "dataFileSHA256": report.dataSHA256.hex, "keysIncluded": report.keysIncluded, "files": report.files,
                "verifiedRecords": report.verification.verifiedRecords, "events": report.verification.events,
                "intact": report.verification.isIntact,
            ]))
        return .success
    }
}

struct RestoreCommand: Subcommand {
    static let name = "restore"
    static let abstract = "Restore a backup into a new store directory, refusing one that does not verify."
    static let usage = """
        Usage: ledger restore --from BACKUP --to DIR [--keys KEYDIR]

        Restores a backup made by `ledger backup` into a new store at DIR (missing, or empty but for the
        key files; an existing store is never overwritten). The keys: those in KEYDIR (--keys, else
        LEDGER_KEYS, else DIR itself) when it holds them; else the backup's (taken with --include-keys),
        written into KEYDIR (mode 0600); when KEYDIR is DIR, a warning on standard error recommends a
        separate key directory (docs/keys.md). Refuses, leaving no store:
          - a backup whose checkpoint.txt is missing or not validly signed by that signing key, or whose
            data.mdb does not have the size and SHA-256 the checkpoint signed (truncated, damaged,
            altered): exit 1; these are checked before LMDB reads the copy;
          - keys of another ledger: a signing key other than the one that signed the backup, a ledger.key
            other than the one the store was created with, or key files in the backup differing from
            KEYDIR's: exit 3;
          - a copy that does not verify in full (as `ledger verify`) or whose head and root are not the
            checkpoint's: exit 1.
        Only then is data.mdb moved into DIR. Progress on a terminal. Prints {"from", "to", "keys",
        "keysRestored", "headSeq", "headHash", "root", "origin", "verifiedRecords", "events", "intact"}.
        Afterwards check the restored store against a checkpoint you kept elsewhere:
        `ledger verify --store DIR --checkpoint FILE --public-key PUBLISHED.pub` (docs/operations.md).
        """
    static let options: Set<String> = ["from", "to"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        guard arguments.value("store") == nil, arguments.value("read-store") == nil else {
            throw CLIError.usage("restore takes --from BACKUP and --to DIR, not --store or --read-store")
        }
        let (fromText, toText) = (try arguments.required("from"), try arguments.required("to"))
        guard !PostgresURL.isURL(toText) else {
            throw CLIError.usage(
                "--to: a backup restores into a store directory; to move it into PostgreSQL, restore it into a directory, then `ledger migrate --from DIR --to postgres://…` (docs/operations.md)"
            )
        }
        let (from, to) = (URL(fileURLWithPath: fromText), URL(fileURLWithPath: toText))
        guard from.standardizedFileURL.path != to.standardizedFileURL.path else {
            throw CLIError.usage("--from and --to are the same directory: restore into a new directory")
        }
        let keyDirectory = keyDirectory(arguments, default: to)
        let report = try refusals {
            try Backup.restore(
                from: from, to: to, keyDirectory: keyDirectory,
                progress: Progress.stages(label: "restore", units: ["copy": "bytes", "verify": "records", "identity vault": "accounts"]))
        }
        console.out(
            JSONLine.render([
                "from": from.path, "to": to.path, "keys": report.keyDirectory.path, "keysRestored": report.keysRestored,
                "headSeq": report.head.sequence, "headHash": report.head.chainHash.hex, "root": report.root.hex, "origin": report.origin,
                "verifiedRecords": report.verification.verifiedRecords, "events": report.verification.events,
                "intact": report.verification.isIntact,
            ]))
        warnIfKeysBesideData(store: to, keys: report.keyDirectory, console: console)
        return .success
    }

    /// --keys, else LEDGER_KEYS, else `fallback`.
    static func keyDirectory(_ arguments: Arguments, default fallback: URL) -> URL {
        let named = arguments.value("keys") ?? ProcessInfo.processInfo.environment[StoreLocation.keysVariable].flatMap { $0.isEmpty ? nil : $0 }
        return named.map { URL(fileURLWithPath: $0) } ?? fallback
    }
}

/// Runs a backup or restore step, turning its refusals into exit codes: 1 when the backup or its
/// copy does not verify, 3 otherwise.
private func refusals<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as BackupError {
        if case .doesNotVerify = error { throw CLIError(code: .verificationFailed, message: error.description) }
        throw CLIError(code: .storeError, message: error.description)
    }
}
