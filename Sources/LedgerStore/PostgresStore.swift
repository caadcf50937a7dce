import Foundation
import LedgerCrypto

extension LedgerStore {
    /// Creates a new store at `location` (see ``create(at:configuration:keyFiles:)`` for a directory).
    ///
    /// A PostgreSQL store: the database must hold none of the ledger's tables
    /// (``LedgerStoreError/alreadyInitialized(directory:)``); the tables and the metadata are created
    /// in one transaction. The key directory is created (mode 0700) if needed; its key files are
    /// written new, or, when it already holds the very key files given in `keyFiles` (a store
    /// directory migrated to PostgreSQL keeps its keys in place), kept.
    public static func create(at location: StoreLocation, configuration: [UInt8], keyFiles: KeyFiles? = nil) throws -> LedgerStore {
        guard case .postgres(let url, let keyDirectory, let readOnly) = location else {
            return try create(at: location.keyDirectory, configuration: configuration, keyFiles: keyFiles)
        }
        try FileAccess.createDirectories(keyDirectory)
        let keyFile = keyDirectory.appendingPathComponent(LedgerKeys.fileName)
        let signingKeyFile = keyDirectory.appendingPathComponent(SigningKey.fileName)
        let existing = try [keyFile, signingKeyFile].filter { try FileAccess.exists($0.path) }
        var renames: [(URL, URL)] = []
        if !existing.isEmpty {
            guard let keyFiles, existing.count == 2, try FileAccess.readKeyFile(keyFile) == [UInt8](keyFiles.ledgerKey),
                try keyFiles.signingKey.map({ try FileAccess.readKeyFile(signingKeyFile) == [UInt8]($0) }) ?? true
            else {
                throw LedgerStoreError.alreadyInitialized(directory: keyDirectory.path + " (it holds key files of another ledger)")
            }
        } else {
            let partialKeyFile = keyDirectory.appendingPathComponent(LedgerKeys.fileName + partialSuffix)
            let partialSigningKeyFile = keyDirectory.appendingPathComponent(SigningKey.fileName + partialSuffix)
            if let keyFiles {
                try FileAccess.createKeyFile(partialKeyFile, contents: [UInt8](keyFiles.ledgerKey))
            } else {
                _ = try LedgerKeys.create(at: partialKeyFile)
            }
            if let signing = keyFiles?.signingKey {
                try FileAccess.createKeyFile(partialSigningKeyFile, contents: [UInt8](signing))
            } else {
                _ = try SigningKey.create(at: partialSigningKeyFile)
            }
            renames = [(partialKeyFile, keyFile), (partialSigningKeyFile, signingKeyFile)]
        }
        let keysURL = renames.first?.0 ?? keyFile
        let keys = try LedgerKeys.load(from: keysURL)
        let signingKey = try SigningKey.load(from: renames.last?.0 ?? signingKeyFile)
        let engine = try PostgresEngine(url: url, readURL: readOnly, creating: true)
        do {
            try engine.createTables(meta: try initialMetadata(keys: keys, signingKey: signingKey, configuration: configuration))
        } catch {
            for (partial, _) in renames { unlink(partial.path) }
            throw error
        }
        for (partial, final) in renames {
            guard rename(partial.path, final.path) == 0 else {
                throw FileAccess.failure("rename \(partial.path) to \(final.lastPathComponent) in", keyDirectory.path, errno)
            }
        }
        if !renames.isEmpty { try syncFile(keyDirectory) }
        return LedgerStore(directory: keyDirectory, keys: keys, lock: nil, engine: engine, location: location)
    }

    /// Opens the store at `location` (see ``init(opening:)`` for a directory). A PostgreSQL store is
    /// refused when the server cannot be reached (``LedgerStoreError/unavailable(store:detail:)``),
    /// holds no ledger, or its key files are missing or not the ones it was created with.
    public convenience init(opening location: StoreLocation) throws {
        guard case .postgres(let url, let keyDirectory, let readOnly) = location else {
            try self.init(opening: location.keyDirectory)
            return
        }
        let keys = try LedgerKeys.load(from: keyDirectory.appendingPathComponent(LedgerKeys.fileName))
        let engine = try PostgresEngine(url: url, readURL: readOnly)
        self.init(directory: keyDirectory, keys: keys, lock: nil, engine: engine, location: location)
        try checkOpened()
    }
}
