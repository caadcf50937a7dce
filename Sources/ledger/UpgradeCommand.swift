import Foundation
import LedgerStore
import OwnershipLedger

struct UpgradeCommand: Subcommand {
    static let name = "upgrade"
    static let abstract = "Copy a storage-format-1 store into a new format-2 store (the old one is left unchanged)."
    static let usage = """
        Usage: ledger upgrade --from OLD_DIR --to NEW_DIR [--keys KEYDIR]

        Opens the format-1 store in OLD_DIR read-only (nothing in it is written; it is refused while
        another process has it open), verifies its hash chain, and creates a format-2 store in NEW_DIR
        with the same ledger.key and ledger-signing.key. Record 1 of the new log records the upgrade:
        the old format, record count, head hash and Merkle root, so format-1 checkpoints and the old
        store can be tied to the new log. Then every format-1 command (a fact with its effects and
        decision, or a support step) becomes one format-2 record, the identity vault is copied, the read
        models and indexes are rebuilt, and the new store is verified. Dispute bundles handed out over
        format-1 records keep verifying with `ledger dispute verify`. Shows progress on a terminal.
        The new store is built in NEW_DIR/upgrade.partial and moved into NEW_DIR only once complete,
        verified and synced: an interrupted upgrade leaves no ledger in NEW_DIR, and every command on it,
        and the next upgrade, names the leftover to remove (docs/operations.md).
        Prints {"from", "to", "formatOneRecords", "records", "events", "identities", "supersededAttempts",
        "headHash", "merkleRoot", "verified"}. Exit 3 when the old chain does not verify (nothing is
        created), NEW_DIR already holds a store, or an interrupted upgrade's upgrade.partial is left in it.
        Both are store directories: to end in PostgreSQL, upgrade into a directory, then `ledger migrate`.
        --keys KEYDIR (or LEDGER_KEYS): the new store keeps its key files in KEYDIR instead of NEW_DIR
        (they are written there when KEYDIR does not hold them yet; KEYDIR holding other keys is refused);
        the old key files are read from OLD_DIR, or from KEYDIR when OLD_DIR has none.
        """
    static let options: Set<String> = ["from", "to"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        if arguments.value("store") != nil { throw CLIError.usage("upgrade takes --from and --to, not --store") }
        let (fromText, toText) = (try arguments.required("from"), try arguments.required("to"))
        guard !PostgresURL.isURL(toText), !PostgresURL.isURL(fromText) else {
            throw CLIError.usage(
                "upgrade reads and writes store directories: upgrade into a directory (--to DIR), then move it into PostgreSQL with `ledger migrate --from DIR --to postgres://…` (docs/operations.md)"
            )
        }
        let (from, to) = (URL(fileURLWithPath: fromText), URL(fileURLWithPath: toText))
        let keys = (arguments.value("keys") ?? ProcessInfo.processInfo.environment[StoreLocation.keysVariable]).flatMap {
            $0.isEmpty ? nil : URL(fileURLWithPath: $0)
        }
        var lastPhase: FormatOneUpgrade.Phase?
        let progress: ((FormatOneUpgrade.Phase, UInt64, UInt64) -> Void)? =
            isatty(STDERR_FILENO) == 1
            ? { phase, done, total in
                if let lastPhase, lastPhase != phase { console.progress("\n") }
                lastPhase = phase
                let percent = total == 0 ? 100 : Int(done * 100 / total)
                console.progress("\rupgrade: \(phase.rawValue): \(done)/\(total) records (\(percent)%)")
            } : nil
        let report = try FormatOneUpgrade.upgrade(from: from, to: to, keyDirectory: keys, clock: { LedgerTime.now() }, progress: progress)
        if lastPhase != nil { console.progress("\n") }
        console.out(
            JSONLine.render([
                "from": from.path, "to": to.path, "formatOneRecords": report.formatOneRecords, "records": report.records,
                "events": report.verification.events, "identities": report.identities, "supersededAttempts": report.supersededAttempts,
                "headHash": report.headHash.hex, "merkleRoot": report.merkleRoot.hex, "verified": report.verification.isIntact,
            ]))
        return .success
    }
}
