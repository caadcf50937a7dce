public import LedgerCore

/// Why a store operation failed. Each message says what was wrong and what to do.
public enum LedgerStoreError: Error, Equatable, CustomStringConvertible, Sendable {
    case notInitialized(directory: String)
    case alreadyInitialized(directory: String)
    case missingKey(path: String)
    case keyReadableByOthers(path: String, mode: UInt16)
    case malformedKey(path: String)
    /// The key file is not the one the store was created with.
    case wrongKey(path: String)
    case newerFormat(found: UInt32, supported: UInt32)
    /// The same event id was appended before with different content.
    case conflictingEvent(eventId: Digest32, sequence: UInt64)
    /// The lineage changed since the caller decided.
    case staleLineageVersion(lineage: LineageKey, expected: UInt64, actual: UInt64)
    case corrupt(String)

    /// A stable kebab-case code.
    public var code: String {
        switch self {
        case .notInitialized: "not-initialized"
        case .alreadyInitialized: "already-initialized"
        case .missingKey, .keyReadableByOthers, .malformedKey, .wrongKey: "key-file"
        case .newerFormat: "newer-format"
        case .conflictingEvent, .staleLineageVersion: "conflict"
        case .corrupt: "corrupt"
        }
    }

    public var description: String {
        switch self {
        case .notInitialized(let directory):
            "no ledger at \(directory): run `ledger init --store \(directory) …` to create one, or pass --store with the right directory"
        case .alreadyInitialized(let directory):
            "\(directory) already holds a ledger; choose another --store directory or remove it first"
        case .missingKey(let path):
            "the ledger key file \(path) is missing: restore it from your backup (without it no lineage or account can be looked up)"
        case .keyReadableByOthers(let path, let mode):
            "the ledger key file \(path) has mode \(String(mode, radix: 8)) and can be read by others: run `chmod 600 \(path)`"
        case .malformedKey(let path):
            "the ledger key file \(path) is not 64 hexadecimal characters: restore it from your backup"
        case .wrongKey(let path):
            "the ledger key file \(path) is not the key this store was created with: restore the matching key from your backup (with another key no lineage or account would be found)"
        case .newerFormat(let found, let supported):
            "the store was written by format version \(found), newer than this ledger supports (\(supported)): upgrade the ledger tool"
        case .conflictingEvent(let eventId, let sequence):
            "event \(eventId.hex) was already appended at sequence \(sequence) with different content"
        case .staleLineageVersion(let lineage, let expected, let actual):
            "lineage \(lineage) is at version \(actual), not \(expected): another writer appended first; decide again"
        case .corrupt(let message):
            "the store is corrupt: \(message)"
        }
    }
}
