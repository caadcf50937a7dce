import Foundation
import LedgerStore
import OwnershipLedger

struct MigrateCommand: Subcommand {
    static let name = "migrate"
    static let abstract = "Copy a ledger between a store directory and PostgreSQL (either way), verified."
    static let usage = """
        Usage: ledger migrate --from DIR|postgres://… --to DIR|postgres://… [--keys DIR]

        Copies the ledger at --from into a new store at --to: every record byte for byte (each one's
        index entries and Merkle nodes recomputed), the read models and the identity vault, with the
        same key files and configuration. The target must be empty: a directory without a ledger, or a
        database without the ledger's tables (`ledger init` is not run first). Then verifies the copy in
        full, as `ledger verify`, and checks that its head (records, chain hash) and Merkle root (a
        checkpoint's root) equal the source's. Stop writers to the source first: records appended after
        the copy started are not copied (reported as sourceGrew).
        A PostgreSQL side keeps its key files in --keys DIR (or LEDGER_KEYS); copying a directory to
        PostgreSQL without --keys leaves them in the source directory and uses them from there. A source
        directory without its own key files (they live elsewhere, docs/keys.md) uses the ones in --keys
        DIR; a target directory gets a copy of the key files inside it. A URL may
        come from LEDGER_STORE instead of --from (passwords stay out of process lists). Progress on a
        terminal. Prints {"from", "to", "records", "readModels", "identities", "headSeq", "headHash",
        "root", "intact", "sourceGrew"}. Exit 0 when the copy verifies, 1 when it does not, 3 store error
        (a non-empty target, an unreachable server).
        """
    static let options: Set<String> = ["from", "to"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        guard arguments.value("store") == nil, arguments.value("read-store") == nil else {
            throw CLIError.usage("migrate takes --from and --to, not --store or --read-store")
        }
        let from = try arguments.value("from") ?? ProcessInfo.processInfo.environment[StoreLocation.storeVariable] ?? arguments.required("from")
        let to = try arguments.required("to")
        let keys = arguments.value("keys") ?? ProcessInfo.processInfo.environment[StoreLocation.keysVariable].flatMap { $0.isEmpty ? nil : $0 }
        var source = try location(from, keys: keys, option: "--from")
        if case .directory(let directory, _) = source {
            let own = try FileAccess.exists(directory.appendingPathComponent(LedgerKeys.fileName).path)
            source = .directory(directory, keys: own ? directory : keys.map { URL(fileURLWithPath: $0) } ?? directory)
        }
        let target = try location(to, keys: PostgresURL.isURL(to) ? keys ?? source.keyDirectory.path : nil, option: "--to")
        if case .directory(let directory, let sourceKeys) = source, sourceKeys == directory, case .directory = target,
            arguments.value("keys") != nil
        {
            throw CLIError.usage("--keys applies only to a PostgreSQL side, or a source directory whose key files are elsewhere")
        }
        let store = try LedgerStore(opening: source)
        let reporter = Progress.reporter(console: console, label: "migrate")
        let (copy, report) = try LedgerStore.migrate(from: store, to: target) { stage, done, total in
            if stage == "records" { reporter?(done, total) }
        }
        let grew = try store.head().sequence != report.head.sequence
        let intact = report.verification.isIntact
        console.out(
            JSONLine.render([
                "from": source.description, "to": target.description, "keys": copy.keyDirectory.path, "records": report.records,
                "readModels": report.readModels, "identities": report.identities, "headSeq": report.head.sequence,
                "headHash": report.head.chainHash.hex, "root": report.root.hex, "intact": intact, "sourceGrew": grew,
                "readModelDifferences": report.verification.readModelDifferences, "indexDifferences": report.verification.indexDifferences,
                "vaultDifferences": report.verification.vaultDifferences,
            ]))
        if grew { console.err("warning: the source grew during the copy; records after \(report.head.sequence) were not copied") }
        return intact ? .success : .verificationFailed
    }

    static func location(_ text: String, keys: String?, option: String) throws -> StoreLocation {
        do {
            return try StoreLocation.resolve(store: text, keys: keys, readStore: nil, environment: [:])
        } catch {
            throw CLIError.usage("\(option): \(error)")
        }
    }
}
