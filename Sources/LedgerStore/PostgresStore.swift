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
            return try create(
                at: location.dataDirectory ?? location.keyDirectory, keyDirectory: location.keyDirectory, configuration: configuration,
                keyFiles: keyFiles)
        }
        let newKeys = try NewKeyFiles(in: keyDirectory, keyFiles: keyFiles)
        let engine = try PostgresEngine(url: url, readURL: readOnly, creating: true)
        do {
            try engine.createTables(meta: try initialMetadata(keys: newKeys.keys, signingKey: newKeys.signingKey, configuration: configuration))
        } catch {
            newKeys.abandon()
            throw error
        }
        try newKeys.commit()
        return LedgerStore(directory: keyDirectory, keys: newKeys.keys, lock: nil, engine: engine, location: location)
    }

    /// Opens the store at `location` (see ``init(opening:)`` for a directory). A PostgreSQL store is
    /// refused when the server cannot be reached (``LedgerStoreError/unavailable(store:detail:)``),
    /// holds no ledger, or its key files are missing or not the ones it was created with.
    public convenience init(opening location: StoreLocation) throws {
        guard case .postgres(let url, let keyDirectory, let readOnly) = location else {
            try self.init(opening: location.dataDirectory ?? location.keyDirectory, keyDirectory: location.keyDirectory)
            return
        }
        let keys = try LedgerKeys.load(from: keyDirectory.appendingPathComponent(LedgerKeys.fileName))
        let engine = try PostgresEngine(url: url, readURL: readOnly)
        self.init(directory: keyDirectory, keys: keys, lock: nil, engine: engine, location: location)
        try checkOpened()
    }
}
