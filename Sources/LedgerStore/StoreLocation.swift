public import Foundation

/// Where a ledger lives: an LMDB store directory (its key files beside `data.mdb`, or in another
/// directory), or a PostgreSQL database with a key directory on the host (the key files never go into
/// the database: whoever can read a dump must not be able to unseal or look up identities).
public enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    /// The store directory and the directory of its key files (the same one unless `--keys` says otherwise).
    case directory(URL, keys: URL)
    /// The primary's URL, the directory of `ledger.key` and `ledger-signing.key`, and optionally a
    /// read-only URL (a replica) for queries.
    case postgres(PostgresURL, keys: URL, readOnly: PostgresURL?)

    /// A store directory with its key files inside it.
    public static func directory(_ url: URL) -> StoreLocation { .directory(url, keys: url) }

    /// The directory holding the key files.
    public var keyDirectory: URL {
        switch self {
        case .directory(_, let keys): keys
        case .postgres(_, let keys, _): keys
        }
    }

    /// The store directory of an LMDB store (nil for PostgreSQL).
    public var dataDirectory: URL? {
        switch self {
        case .directory(let url, _): url
        case .postgres: nil
        }
    }

    /// The location as messages name it (a URL without its password).
    public var description: String {
        switch self {
        case .directory(let url, _): url.path
        case .postgres(let url, _, _): url.description
        }
    }

    /// The environment variable naming the store when `--store` is not given (a directory, or a
    /// PostgreSQL URL kept out of process lists).
    public static let storeVariable = "LEDGER_STORE"
    /// The environment variable naming the key directory when `--keys` is not given (for any store).
    public static let keysVariable = "LEDGER_KEYS"
    /// The environment variable naming a read-only URL when `--read-store` is not given.
    public static let readStoreVariable = "LEDGER_READ_STORE"

    /// Resolves a store from the command line's values, falling back to the environment
    /// (``storeVariable``, ``keysVariable``, ``readStoreVariable``), then to `./ledger-data` (whose key
    /// files are in the store directory unless `--keys` or ``keysVariable`` names another).
    /// Throws a message naming the option at fault (never repeating a URL's password).
    public static func resolve(
        store: String?, keys: String?, readStore: String?, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(LocationError) -> StoreLocation {
        let storeText = store ?? environment[storeVariable].flatMap { $0.isEmpty ? nil : $0 }
        let origin = store == nil ? storeVariable : "--store"
        let keysText = keys ?? environment[keysVariable].flatMap { $0.isEmpty ? nil : $0 }
        let readText = readStore ?? environment[readStoreVariable].flatMap { $0.isEmpty ? nil : $0 }
        guard let storeText, PostgresURL.isURL(storeText) else {
            if readStore != nil { throw LocationError("--read-store applies only to a PostgreSQL store") }
            let directory = URL(fileURLWithPath: storeText ?? "ledger-data")
            return .directory(directory, keys: keysText.map { URL(fileURLWithPath: $0) } ?? directory)
        }
        let url: PostgresURL
        do {
            url = try PostgresURL(storeText)
        } catch {
            throw LocationError("\(origin): \(error)")
        }
        guard let keysText else {
            throw LocationError(
                "a PostgreSQL store needs the directory of its key files (ledger.key, ledger-signing.key): pass --keys DIR or set \(keysVariable)")
        }
        var readOnly: PostgresURL?
        if let readText {
            do {
                readOnly = try PostgresURL(readText)
            } catch {
                throw LocationError("\(readStore == nil ? readStoreVariable : "--read-store"): \(error)")
            }
        }
        return .postgres(url, keys: URL(fileURLWithPath: keysText), readOnly: readOnly)
    }

    /// Why a store location was refused.
    public struct LocationError: Error, CustomStringConvertible, Sendable {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
