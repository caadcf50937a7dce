public import Foundation

/// What `ledger backup` and `ledger restore` need of a store directory: a consistent copy of
/// `data.mdb` taken beside running writers, and the key files read or installed whole.
extension LedgerStore {
    /// Writes a copy of this store's `data.mdb` to the new file `file` (mode 0600; refused when it
    /// exists), synced to disk. The copy is what one read transaction sees, taken while writers keep
    /// appending: every record committed before it began and none after. Only live pages are copied
    /// (`MDB_CP_COMPACT`), so entries erased before the copy (the sealed UIDs of deleted accounts) are
    /// not in it. LMDB stores only.
    /// - Complexity: O(live pages); memory does not grow with the store.
    public func copyDataFile(to file: URL) throws {
        guard case .directory = location else {
            throw LedgerStoreError.corrupt("\(location) is not a store directory: it has no data.mdb to copy")
        }
        let environment = try lmdbEngine.environment
        try FileAccess.withNewFile(file) { fd in try environment.copyCompacted(to: fd, path: file.path) }
    }

    /// The contents of both key files in `directory`: a missing ledger key is
    /// ``LedgerStoreError/missingKey(path:)``, a missing signing key
    /// ``LedgerStoreError/missingSigningKey(path:)``, and either file readable by others is refused.
    public static func keyFiles(in directory: URL) throws -> KeyFiles {
        let ledgerKey = Data(try FileAccess.readKeyFile(directory.appendingPathComponent(LedgerKeys.fileName)))
        let signingURL = directory.appendingPathComponent(SigningKey.fileName)
        guard try FileAccess.exists(signingURL.path) else { throw LedgerStoreError.missingSigningKey(path: signingURL.path) }
        return KeyFiles(ledgerKey: ledgerKey, signingKey: Data(try FileAccess.readKeyFile(signingURL)))
    }

    /// Which of the two key files `directory` holds (none, one or both).
    public static func keyFileNames(in directory: URL) throws -> [String] {
        try [LedgerKeys.fileName, SigningKey.fileName].filter { try FileAccess.exists(directory.appendingPathComponent($0).path) }
    }

    /// Writes `keyFiles` into `directory` (created mode 0700 when missing) as `init` writes a new
    /// store's: `.partial` files renamed into place, mode 0600. A directory already holding exactly
    /// these files keeps them; holding any other key file is refused (``LedgerStoreError/keysInUse(directory:)``).
    public static func installKeyFiles(_ keyFiles: KeyFiles, in directory: URL) throws {
        try NewKeyFiles(in: directory, keyFiles: keyFiles).commit()
    }
}
