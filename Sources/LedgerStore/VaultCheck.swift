import Foundation
import LedgerCore
import LedgerCrypto

extension LedgerStore {
    /// Sealed UIDs whose vault entries one batch read looks up in the second pass of ``vaultDifferences(_:)``.
    static let vaultCheckChunk = 1_024

    /// What is inconsistent in the identity vault, as lines naming pseudonyms (never a UID): empty when
    /// every vault entry (vault key → pseudonym) points to a pseudonym whose sealed UID unseals to a UID
    /// with that very vault key, and every sealed UID is pointed to by exactly one vault entry.
    ///
    /// The vault is outside the hash chain: a deletion erases an account's entry and its sealed UID
    /// together (docs/events.md), and the log names accounts only by pseudonym. Nothing in the log can
    /// say which pseudonym a UID's entry should point to, but the entries can be checked against each
    /// other with the ledger key: an entry moved to another account's pseudonym (two entries swapped)
    /// points to a UID that is not its own.
    ///
    /// Memory stays bounded (nothing is collected per entry):
    /// 1. the vault entries in vault-key order, each with the UID sealed under its pseudonym: one
    ///    unseal and one keyed hash per account; an entry is confirmed when its UID has its key;
    /// 2. the count of the vault's entries: when the sealed UIDs are exactly as many as the confirmed
    ///    entries, every one of them is pointed to by exactly one entry (two confirmed entries cannot
    ///    point to one sealed UID: they would have the same key), and the vault is consistent;
    /// 3. only otherwise, the sealed UIDs in the engine's order, in chunks: each is unsealed, its UID's
    ///    vault entry looked up, and each one no confirmed entry accounts for is named.
    ///
    /// An entry the engine cannot read (a malformed LMDB entry) is one line. A libcrypto that cannot
    /// unseal at all is thrown (`CryptoError`), never reported as damage.
    ///
    /// A UID sealed since session 28 is bound to its pseudonym (``SealedUID/bound``): moved under
    /// another pseudonym, with or without the vault entries, it does not unseal there, and is named
    /// ("does not unseal … under this pseudonym"). A legacy seal (``SealedUID/legacy``) is not: two
    /// legacy seals swapped together with their entries stay consistent. ``vaultCheck(_:)`` also
    /// counts them.
    public func vaultDifferences(_ reader: any EngineReader) throws -> [String] {
        try vaultCheck(reader).differences
    }

    /// ``vaultDifferences(_:)``, and how many of the vault entries point to a legacy (unbound) seal:
    /// the accounts whose vault is protected only by the consistency check.
    ///
    /// The first step runs on two threads when the engine gives a second transaction of the reader's
    /// snapshot (``EngineReader/readingSameSnapshot(_:)``): vault keys are keyed hashes, spread evenly,
    /// so each thread takes half of them; the findings are the same, in the same order. `progress` is
    /// called with (vault entries checked, their count) as the first step goes, and once at its end:
    /// from either thread, never two calls at once.
    public func vaultCheck(
        _ reader: any EngineReader, progress: ((UInt64, UInt64) -> Void)? = nil
    ) throws -> (differences: [String], legacySeals: Int) {
        let middle = Key128(high: 1 << 63, low: 0)
        // The vault holds an entry and a sealed UID per account.
        let counter = try progress.map { VaultProgress(total: UInt64(max(0, try reader.vaultEntryCount() / 2)), report: $0) }
        let upperHalf = OnSameSnapshot(reader) { [self] in try tallyVaultEntries($0, from: middle, before: nil, counter: counter) }
        let lowerHalf = Result { try tallyVaultEntries(reader, from: .zero, before: middle, counter: counter) }
        let upper = upperHalf.wait()
        var tally = try lowerHalf.get()
        if tally.unreadable == nil { tally.add(try upper.get() ?? tallyVaultEntries(reader, from: middle, before: nil, counter: counter)) }
        counter?.finish()
        var differences = tally.differences
        do {
            if let unreadable = tally.unreadable { throw LedgerStoreError.corrupt(unreadable) }
            let sealedUIDs = try reader.vaultEntryCount() - tally.entries
            guard sealedUIDs != tally.confirmed else { return (differences.lines, tally.legacySeals) }
            try forEachUnaccountedSealedUID(reader) { account, problem in differences.append("pseudonym \(account): \(problem)") }
            if differences.isEmpty {
                differences.append(
                    "the identity vault holds \(sealedUIDs) sealed UIDs for \(tally.confirmed) vault entries that are their UIDs': \(abs(sealedUIDs - tally.confirmed)) unaccounted for"
                )
            }
        } catch LedgerStoreError.corrupt(let message) {
            differences.append("the identity vault cannot be read: \(message)")
        }
        return (differences.lines, tally.legacySeals)
    }

    /// What the first step of ``vaultCheck(_:)`` found over a range of vault keys.
    private struct VaultTally {
        var entries = 0
        var confirmed = 0
        var legacySeals = 0
        var differences = DifferenceList()
        /// Why the walk stopped at an entry it could not read (nothing after it was checked).
        var unreadable: String?

        /// Adds the tally of the range after this one.
        mutating func add(_ next: VaultTally) {
            entries += next.entries
            confirmed += next.confirmed
            legacySeals += next.legacySeals
            differences.append(contentsOf: next.differences)
            unreadable = next.unreadable
        }
    }

    /// The first step of ``vaultCheck(_:)`` over the vault entries from `start` to before `end` (nil:
    /// to the last): each one's sealed UID unsealed, and its UID's vault key compared with the entry's.
    private func tallyVaultEntries(
        _ reader: any EngineReader, from start: Key128, before end: Key128?, counter: VaultProgress?
    ) throws -> VaultTally {
        var tally = VaultTally()
        defer { counter?.add(UInt64(tally.entries % VaultProgress.step)) }
        do {
            try reader.forEachVaultEntry(from: start) { vaultKey, entry in
                if let end, vaultKey >= end { return false }
                tally.entries += 1
                if tally.entries % VaultProgress.step == 0 { counter?.add(UInt64(VaultProgress.step)) }
                guard let sealed = entry.sealedUID else {
                    tally.differences.append("pseudonym \(entry.account): a vault entry points to it, but no UID is sealed under it")
                    return true
                }
                // A sealed UID that does not unseal is named by the third step (which then runs):
                // once, whether or not an entry points to it.
                guard let uid = try openSealedUID(sealed, of: entry.account) else { return true }
                if sealed.first == SealedUID.legacy { tally.legacySeals += 1 }
                if try keys.vaultKey(uidBytes: uid) == vaultKey {
                    tally.confirmed += 1
                } else {
                    tally.differences.append(
                        "pseudonym \(entry.account): the vault entry pointing to it is not its UID's (the UID sealed under it has another vault key): entries swapped, copied or changed"
                    )
                }
                return true
            }
        } catch LedgerStoreError.corrupt(let message) {
            tally.unreadable = message
        }
        return tally
    }

    /// The vault entries the first step has checked, on either thread, reported every 10,000 or so.
    private final class VaultProgress: @unchecked Sendable {
        static let step = 1_000
        private let lock = NSLock()
        private let total: UInt64
        private let report: (UInt64, UInt64) -> Void
        private var done: UInt64 = 0
        private var reported: UInt64 = 0

        init(total: UInt64, report: @escaping (UInt64, UInt64) -> Void) { (self.total, self.report) = (total, report) }

        func add(_ count: UInt64) {
            lock.withLock {
                done += count
                guard done - reported >= 10_000, done < total else { return }
                reported = done
                report(done, total)
            }
        }

        /// Reports the end: every entry checked (as many as there were).
        func finish() { lock.withLock { report(done, done) } }
    }

    /// Visits each sealed UID that no confirmed vault entry accounts for, with what is wrong with it.
    private func forEachUnaccountedSealedUID(_ reader: any EngineReader, _ report: (AccountID, String) -> Void) throws {
        var chunk: [(account: AccountID, sealed: [UInt8], vaultKey: Key128)] = []
        chunk.reserveCapacity(Self.vaultCheckChunk)
        func flush() throws {
            let found = try reader.identities(vaultKeys: chunk.map(\.vaultKey))
            for (account, sealed, vaultKey) in chunk {
                switch found[vaultKey] {
                case nil: report(account, "no vault entry points to it: the UID sealed under it has none (removed, or this sealed UID left behind)")
                case let entry? where entry.account != account:
                    report(account, "the vault entry of the UID sealed under it points to another pseudonym, \(entry.account)")
                case let entry? where entry.sealedUID != sealed:
                    report(account, "a second sealed UID is stored under it, which lookups never read")
                default: break
                }
            }
            chunk.removeAll(keepingCapacity: true)
        }
        try reader.forEachSealedUID { account, sealed in
            guard let uid = try openSealedUID(sealed, of: account) else {
                report(
                    account,
                    sealed.first == SealedUID.bound
                        ? "its sealed UID does not unseal with this store's key under this pseudonym (damaged, replaced, or moved from another pseudonym)"
                        : "its sealed UID does not unseal with this store's key (damaged or replaced)")
                return true
            }
            chunk.append((account, sealed, try keys.vaultKey(uidBytes: uid)))
            if chunk.count == Self.vaultCheckChunk { try flush() }
            return true
        }
        if !chunk.isEmpty { try flush() }
    }
}
