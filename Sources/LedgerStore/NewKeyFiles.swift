import Foundation
import LedgerCrypto

/// The key files of a store being created, in their directory (the store directory, or the one
/// `--keys` names): written as `*.partial` and renamed into place only once the store's metadata
/// has committed, so an interrupted create leaves `.partial` files (an incomplete init, never
/// deleted automatically); or, when the directory already holds exactly the key files given (an
/// upgrade or a migration keeping its keys where they are), kept. Key files of another ledger are
/// never adopted: a new ledger gets new keys.
struct NewKeyFiles {
    let directory: URL
    let keys: LedgerKeys
    let signingKey: Ed25519PrivateKey
    /// The `.partial` files to rename into place (none when the files were kept).
    private let pending: [(partial: URL, final: URL)]

    /// Prepares the key files in `directory` (created, mode 0700, when missing): `keyFiles`' contents,
    /// or new keys (a new signing key when `keyFiles` has none).
    init(in directory: URL, keyFiles: LedgerStore.KeyFiles?) throws {
        self.directory = directory
        try FileAccess.createDirectories(directory)
        let final = [LedgerKeys.fileName, SigningKey.fileName].map { directory.appendingPathComponent($0) }
        let partial = final.map { URL(fileURLWithPath: $0.path + LedgerStore.partialSuffix) }
        if try Self.holdsKeys(directory, keyFiles: keyFiles) {
            (keys, signingKey, pending) = (try LedgerKeys.load(from: final[0]), try SigningKey.load(from: final[1]), [])
            return
        }
        if let ledgerKey = keyFiles?.ledgerKey {
            try FileAccess.createKeyFile(partial[0], contents: [UInt8](ledgerKey))
            keys = try LedgerKeys.load(from: partial[0])
        } else {
            keys = try LedgerKeys.create(at: partial[0])
        }
        if let signing = keyFiles?.signingKey {
            try FileAccess.createKeyFile(partial[1], contents: [UInt8](signing))
            signingKey = try SigningKey.load(from: partial[1])
        } else {
            signingKey = try SigningKey.create(at: partial[1])
        }
        pending = Array(zip(partial, final))
    }

    /// Whether `directory` (missing: none) already holds exactly `keyFiles` (true: they are kept) or
    /// no key file (false). Throws what creating key files there would: `.partial` files left over
    /// (``LedgerStoreError/incompleteInit(directory:detail:)``), other key files
    /// (``LedgerStoreError/keysInUse(directory:)``). Writes nothing.
    static func holdsKeys(_ directory: URL, keyFiles: LedgerStore.KeyFiles?) throws -> Bool {
        let final = [LedgerKeys.fileName, SigningKey.fileName].map { directory.appendingPathComponent($0) }
        let partial = final.map { URL(fileURLWithPath: $0.path + LedgerStore.partialSuffix) }
        let leftOver = try partial.filter { try FileAccess.exists($0.path) }
        guard leftOver.isEmpty else {
            throw LedgerStoreError.incompleteInit(
                directory: directory.path, detail: leftOver.map(\.lastPathComponent).joined(separator: " and ") + " left over")
        }
        let existing = try final.filter { try FileAccess.exists($0.path) }
        guard !existing.isEmpty else { return false }
        guard let keyFiles, existing.count == 2, try FileAccess.readKeyFile(final[0]) == [UInt8](keyFiles.ledgerKey),
            try keyFiles.signingKey.map({ try FileAccess.readKeyFile(final[1]) == [UInt8]($0) }) ?? true
        else { throw LedgerStoreError.keysInUse(directory: directory.path) }
        return true
    }

    /// Renames the `.partial` files into place and syncs the directory.
    func commit() throws {
        guard !pending.isEmpty else { return }
        for (partial, final) in pending {
            guard rename(partial.path, final.path) == 0 else {
                throw FileAccess.failure("rename \(partial.path) to \(final.lastPathComponent) in", directory.path, errno)
            }
        }
        try FileAccess.sync(directory)
    }

    /// Removes the `.partial` files: the store they were for could not be created.
    func abandon() {
        for (partial, _) in pending { unlink(partial.path) }
    }
}
