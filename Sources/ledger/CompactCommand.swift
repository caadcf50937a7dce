import Foundation
import LedgerStore
import OwnershipLedger

struct CompactCommand: Subcommand {
    static let name = "compact"
    static let abstract = "Rewrite data.mdb with only its live pages (purges erased identities)."
    static let usage = """
        Usage: ledger compact [--store DIR] [--keys DIR]

        LMDB copies pages on write: an erased identity (the sealed UID of a deleted account) stays in
        freed pages of data.mdb until they are reused. compact copies the store's live pages into a
        temporary directory beside data.mdb, syncs the copy and renames it over data.mdb, so no freed
        page remains. Run it after account deletions; backups taken before still hold the erased data.
        A format-2 store comes out as format 3 (recent-change regions added; docs/storage-format.md).
        Refused (exit 3) while another process has the store open: stop servers and other commands first.
        Prints {"store", "bytesBefore", "bytesAfter", "formatVersion"}.
        """
    static let options: Set<String> = []

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let (directory, keys) = try arguments.storeDirectory(
            "compact", alternative: "space freed by deletions is reclaimed by PostgreSQL's VACUUM (docs/scale-out.md)")
        let result = try LedgerStore.compact(at: directory, keyDirectory: keys)
        console.out(
            JSONLine.render([
                "store": directory.path, "bytesBefore": result.bytesBefore, "bytesAfter": result.bytesAfter,
                "formatVersion": Int(result.formatVersion),
            ]))
        return .success
    }
}
