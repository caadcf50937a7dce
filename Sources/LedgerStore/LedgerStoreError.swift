import Foundation
import LedgerCore

/// Why a store operation failed. Each message says what was wrong and what to do.
public enum LedgerStoreError: Error, Equatable, CustomStringConvertible, Sendable {
    case notInitialized(directory: String)
    case alreadyInitialized(directory: String)
    /// `init` was given a key directory that already holds key files (of another ledger).
    case keysInUse(directory: String)
    case missingKey(path: String)
    case keyReadableByOthers(path: String, mode: UInt16)
    /// The directory holding the key files can be written by others (who could delete or replace them).
    case keyDirectoryWritableByOthers(path: String, mode: UInt16)
    case malformedKey(path: String)
    /// The key file is not the one the store was created with.
    case wrongKey(path: String)
    case newerFormat(found: UInt32, supported: UInt32)
    /// The store recorded a signing key at creation (or first use) and its file is gone.
    case missingSigningKey(path: String)
    /// The signing key file is not the key the store recorded (SHA-256 of the public keys, hex).
    case wrongSigningKey(path: String, recorded: String, found: String)
    /// `init` was interrupted: key files without the LMDB metadata, or temporary files left over.
    case incompleteInit(directory: String, detail: String)
    /// `ledger upgrade` or `ledger restore` (`command`) was interrupted: its staging directory `staging`,
    /// inside the target, is left. `storeInPlace` when the new store had already been moved into the
    /// target and only the staging directory's removal was cut short (the store is complete).
    case interruptedCopy(command: String, staging: String, storeInPlace: Bool)
    /// `directory` is the staging directory of a `ledger upgrade` (`command`): an unfinished copy, never a ledger.
    case stagingDirectory(directory: String, command: String)
    /// `compact` found another process (or another open store in this process) using the store.
    case storeInUse(directory: String)
    /// Opening found the store held exclusively by `ledger compact`, `ledger init` or `ledger upgrade` in another process.
    case storeBusy(directory: String)
    /// The store was written in storage format 1: it must be upgraded (`ledger upgrade`).
    case formatOne(directory: String)
    case corrupt(String)
    /// A UID's vault entry points to a pseudonym under which another UID (or none, or bytes that do
    /// not unseal) is sealed: the identity vault was damaged or changed outside the ledger.
    case identityVaultMismatch
    /// The database server of a PostgreSQL store cannot be reached (or was lost and not regained
    /// within the reconnection window): nothing was written; retry later.
    case unavailable(store: String, detail: String)
    /// The database server refused a statement (permissions, a full disk, a changed schema).
    case database(store: String, detail: String)
    /// A file or directory could not be used: `errno` says why (`EACCES`/`EPERM`: this user may not).
    /// Built by ``FileAccess/failure(_:_:_:)``, which names the directory that blocks the way when there is one.
    case fileAccess(path: String, operation: String, errno: Int32)
    /// An output file (`--out`) the ledger refuses to write: a symbolic link, or a path in its store or key directory.
    case refusedOutput(path: String, reason: String)

    /// A stable kebab-case code.
    public var code: String {
        switch self {
        case .notInitialized: "not-initialized"
        case .alreadyInitialized, .keysInUse: "already-initialized"
        case .missingKey, .keyReadableByOthers, .keyDirectoryWritableByOthers, .malformedKey, .wrongKey: "key-file"
        case .newerFormat: "newer-format"
        case .missingSigningKey, .wrongSigningKey: "signing-key-file"
        case .incompleteInit: "incomplete-init"
        case .interruptedCopy, .stagingDirectory: "incomplete-copy"
        case .storeInUse, .storeBusy: "store-in-use"
        case .formatOne: "old-format"
        case .corrupt, .identityVaultMismatch: "corrupt"
        case .unavailable: "unavailable"
        case .database: "database"
        case .refusedOutput: "refused-output"
        case .fileAccess(_, _, let code): code == EACCES || code == EPERM ? "permission-denied" : "file-access"
        }
    }

    public var description: String {
        switch self {
        case .notInitialized(let directory):
            "no ledger at \(directory): run `ledger init --store \(directory) …` to create one, or pass --store with the right directory"
        case .alreadyInitialized(let directory):
            "\(directory) already holds a ledger; choose another --store directory or remove it first"
        case .keysInUse(let directory):
            "the key directory \(directory) already holds ledger key files: a new ledger gets new keys, never another ledger's; give an empty directory with --keys (or LEDGER_KEYS), or remove the files if they are left from a store you deleted"
        case .missingKey(let path):
            "the ledger key file \(path) is missing: restore it from your backup (without it no lineage or account can be looked up); if this store keeps its key files in another directory, give it with --keys DIR (or LEDGER_KEYS)"
        case .keyReadableByOthers(let path, let mode):
            "the ledger key file \(path) has mode \(String(mode, radix: 8)) and can be read by others: run `chmod 600 \(path)`"
        case .keyDirectoryWritableByOthers(let path, let mode):
            "the key directory \(path) has mode \(String(mode, radix: 8)) and can be written by others, who could delete or replace the key files: run `chmod 700 \(path)`"
        case .malformedKey(let path):
            "the ledger key file \(path) is not 64 hexadecimal characters: restore it from your backup"
        case .wrongKey(let path):
            "the ledger key file \(path) is not the key this store was created with: restore the matching key from your backup (with another key no lineage or account would be found)"
        case .newerFormat(let found, let supported):
            "the store was written by format version \(found), newer than this ledger supports (\(supported)): upgrade the ledger tool"
        case .missingSigningKey(let path):
            "the ledger signing key file \(path) is missing: restore it from your backup (checkpoints and dispute bundles were signed with it; a new key would make them unverifiable with the published public key); if this store keeps its key files in another directory, give it with --keys DIR (or LEDGER_KEYS)"
        case .wrongSigningKey(let path, let recorded, let found):
            "the ledger signing key file \(path) does not match the signing key this store recorded (the file's key is ownership-ledger/\(found.prefix(8)), the store's is ownership-ledger/\(recorded.prefix(8)), as in checkpoint origins): restore the matching key from your backup (checkpoints and dispute bundles were signed with it)"
        case .incompleteInit(let directory, let detail):
            "\(directory) holds an incomplete ledger from an interrupted init (\(detail)): remove it and run init again"
        case .interruptedCopy(let command, let staging, false):
            "an interrupted `ledger \(command)` left \(staging), an unfinished copy that is not a ledger (the \(command == "restore" ? "backup" : "old store") was not changed): \(command == "restore" ? "unless a restore into this directory is still running, " : "")remove it and run `ledger \(command)` again"
        case .interruptedCopy(let command, let staging, true):
            "an interrupted `ledger \(command)` left \(staging) after moving the new store into place: the store is complete; remove \(staging), then use the store"
        case .stagingDirectory(let directory, let command):
            "\(directory) is the staging directory of a `ledger \(command)`, an unfinished copy that is not a ledger: never use it as a store; if that upgrade is no longer running, remove it and run `ledger \(command)` again"
        case .storeInUse(let directory):
            "the store \(directory) is in use by another process: stop every process using it (servers, other ledger commands) and try again"
        case .storeBusy(let directory):
            "the store \(directory) is locked by another process that is compacting or creating it (ledger compact, ledger init, ledger upgrade): try again when it finishes"
        case .formatOne(let directory):
            "\(directory) holds a ledger in storage format 1, which this ledger no longer opens: run `ledger upgrade --from \(directory) --to NEW_DIRECTORY` (it copies the ledger into format 2 and leaves this store unchanged), then use the new store"
        case .corrupt(let message):
            "the store is corrupt: \(message)"
        case .identityVaultMismatch:
            "the store is damaged or was tampered with: the identity vault entry of this UID points to an account whose sealed UID is not this UID, so the ledger cannot tell which account it is; nothing was answered or written for it: run `ledger verify` (it names the accounts involved) and restore the store from a backup"
        case .unavailable(let store, let detail):
            "the database \(store) cannot be reached (\(detail)): nothing was written; retry when it is back"
        case .database(let store, let detail):
            "the database \(store) refused the ledger's statement: \(detail)"
        case .refusedOutput(let path, let reason):
            "refusing to write \(path): \(reason)"
        case .fileAccess(let path, let operation, let code) where code == EACCES || code == EPERM:
            "permission denied (\(FileAccess.name(of: code))): cannot \(operation) \(path) as \(FileAccess.currentUser): "
                + "run the ledger as a user allowed to, or change the owner or mode of \(path)"
        case .fileAccess(let path, let operation, let code):
            "cannot \(operation) \(path): \(String(cString: strerror(code))) (\(FileAccess.name(of: code)))"
        }
    }
}
