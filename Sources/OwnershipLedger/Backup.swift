public import Foundation
import LedgerCore
import LedgerCrypto
public import LedgerStore
import Projections

/// Backups of a store directory (`ledger backup`, `ledger restore`; docs/operations.md).
///
/// A backup is a directory (mode 0700, every file 0600) holding:
/// - `data.mdb`: a compacted copy of the store's LMDB file, taken from one read transaction while
///   writers keep running; the app configuration is inside it (the store's metadata);
/// - `checkpoint.txt`: a checkpoint of the copy (``Ledger/makeCheckpoint()``'s format) signed with the
///   live ledger's signing key, with one more extension line, `backup data.mdb <bytes> <sha256 hex>`,
///   so the signature covers the exact bytes of `data.mdb`; written last, after the copy verified;
/// - `ledger-signing.pub`: the public key that signed it (for checking the checkpoint anywhere; trust
///   the key you published, not this copy of it);
/// - with `includeKeys` only: `ledger.key` and `ledger-signing.key`.
///
/// Restoring checks the signature and the file's digest before LMDB ever reads the copy, then opens it
/// with the keys given, verifies it in full and only then moves it into place.
public enum Backup {
    public static let dataFileName = "data.mdb"
    public static let checkpointFileName = "checkpoint.txt"
    public static let publicKeyFileName = "ledger-signing.pub"
    /// The directory a restore stages the copy in, inside the target.
    static let stagingDirectoryName = "restore.partial"
    /// The directory a backup of a PostgreSQL store stages its snapshot in, inside the backup directory.
    static let snapshotDirectoryName = "snapshot.partial"
    /// The checkpoint extension line naming the backup's data file: `backup data.mdb <bytes> <sha256 hex>`.
    public static let dataLinePrefix = "backup data.mdb "

    /// `backup data.mdb <bytes> <sha256 hex>`.
    public static func dataLine(bytes: Int, sha256: [UInt8]) -> String { "\(dataLinePrefix)\(bytes) \(sha256.hex)" }

    /// Parses a ``dataLine(bytes:sha256:)`` line; nil for any other line. One spelling per value: a
    /// decimal size without sign or leading zero, 64 lowercase hex digits.
    public static func parseDataLine(_ line: String) -> (bytes: Int, sha256: [UInt8])? {
        guard line.hasPrefix(dataLinePrefix) else { return nil }
        let parts = line.dropFirst(dataLinePrefix.count).split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 2, let bytes = Int(parts[0]), bytes >= 0, String(bytes) == parts[0],
            parts[1].count == 64, parts[1].allSatisfy({ "0123456789abcdef".contains($0) }),
            let digest = [UInt8](hex: String(parts[1]))
        else { return nil }
        return (bytes, digest)
    }

    /// What a backup holds and how it was checked.
    public struct Report: Sendable {
        /// The copy's head: every record committed before the copy began.
        public var head: LogHead
        /// The RFC 6962 root over its records (the checkpoint's root).
        public var root: [UInt8]
        /// The signed checkpoint, as written to `checkpoint.txt`.
        public var checkpoint: String
        /// The checkpoint's origin: `ownership-ledger/<key id>` of the signing key.
        public var origin: String
        public var dataBytes: Int
        public var dataSHA256: [UInt8]
        public var keysIncluded: Bool
        /// The files written, by name.
        public var files: [String]
        /// The copy's full verification (chain, Merkle nodes, invariants, read models, indexes).
        public var verification: ReplayReport
    }

    /// Takes a backup of `ledger` (a store directory) into `directory`, which must be missing or an
    /// empty directory (created, or set to, mode 0700). Copies `data.mdb` while writers keep running
    /// (``LedgerStore/copyDataFile(to:)``), verifies the copy in full in memory that does not grow with
    /// the store, and signs a checkpoint of it (with the digest of its `data.mdb`) with the ledger's
    /// signing key: the live store's, whether or not `includeKeys` copies the key files too.
    /// A copy that does not verify is removed and ``BackupError/doesNotVerify(_:)`` thrown; on any
    /// failure nothing is left in `directory`. `progress` gets (stage, done, total): `copy` in bytes
    /// (the total is the store's `data.mdb`, which the compacted copy may undercut), then `verify` in records.
    public static func take(
        of ledger: Ledger, into directory: URL, includeKeys: Bool, progress: ((String, UInt64, UInt64) -> Void)? = nil
    ) throws -> Report {
        let store = ledger.store
        if case .directory(let storeDirectory, _) = store.location,
            directory.standardizedFileURL.path == storeDirectory.standardizedFileURL.path
        {
            throw BackupError.targetInUse("the backup directory \(directory.path) is the store itself: choose a new directory")
        }
        let signer = try ledger.signer()
        let keyFiles = includeKeys ? try LedgerStore.keyFiles(in: store.keyDirectory) : nil
        let created = try prepareEmptyDirectory(directory, role: "the backup directory", allowed: [])
        var written: [String] = []
        do {
            let dataFile = directory.appendingPathComponent(dataFileName)
            switch store.location {
            case .directory(let storeDirectory, _):
                progress?("copy", 0, UInt64(try FileAccess.size(storeDirectory.appendingPathComponent(dataFileName).path)))
                try store.copyDataFile(to: dataFile)
            case .postgres:
                try copySnapshot(of: store, to: dataFile, staging: directory.appendingPathComponent(snapshotDirectoryName), progress: progress)
            }
            written.append(dataFileName)
            let (bytes, digest) = try FileAccess.sha256(ofFile: dataFile.path)
            progress?("copy", UInt64(bytes), UInt64(bytes))
            let (verification, head, signed) = try {
                let copy = try LedgerStore.openCopy(at: directory, keyDirectory: store.keyDirectory)
                let verification = try copy.replay(
                    progress: progress.map { report in { report("verify", $0, $1) } },
                    vaultProgress: progress.map { report in { report("identity vault", $0, $1) } })
                let (head, signed) = try copy.read { reader in
                    (try reader.head(), try Ledger.checkpoint(of: reader, key: signer, extensions: [dataLine(bytes: bytes, sha256: digest)]))
                }
                return (verification, head, signed)
            }()
            guard verification.isIntact else {
                throw BackupError.doesNotVerify(
                    "the copy of \(store.location) has \(summary(of: verification)): nothing was kept; run `ledger verify` on the store")
            }
            var files: [(String, [UInt8])] = [
                (checkpointFileName, Array(signed.text.utf8)), (publicKeyFileName, Array(signer.publicKey.pem.utf8)),
            ]
            if let keyFiles {
                files.append((LedgerKeys.fileName, Array(keyFiles.ledgerKey)))
                files.append((SigningKey.fileName, Array(keyFiles.signingKey ?? Data())))
            }
            // The checkpoint last but the keys: a backup without it is refused as unfinished.
            for (name, contents) in files.reversed() {
                try FileAccess.createFile(directory.appendingPathComponent(name), contents: contents)
                written.append(name)
            }
            try FileAccess.sync(directory)
            return Report(
                head: head, root: signed.checkpoint.rootHash, checkpoint: signed.text, origin: signed.checkpoint.origin, dataBytes: bytes,
                dataSHA256: digest, keysIncluded: includeKeys, files: written.sorted(), verification: verification)
        } catch {
            for name in written { unlink(directory.appendingPathComponent(name).path) }
            if created { rmdir(directory.path) }
            throw error
        }
    }

    /// Writes one read snapshot of a PostgreSQL store as a store directory's `data.mdb` at `dataFile`
    /// (``LedgerStore/migrate(from:to:progress:)`` into `staging`, then the file moved out and the
    /// staging directory, with the copies of the key files migration puts there, removed).
    /// `progress` gets `snapshot` in records.
    static func copySnapshot(
        of store: LedgerStore, to dataFile: URL, staging: URL, progress: ((String, UInt64, UInt64) -> Void)?
    ) throws {
        guard mkdir(staging.path, 0o700) == 0 else { throw FileAccess.failure("create the directory", staging.path, errno) }
        defer { try? FileManager.default.removeItem(at: staging) }
        // The copy is closed (its environment released) before its file moves.
        _ = try LedgerStore.migrate(from: store, to: .directory(staging)) { stage, done, total in
            if stage == "records" { progress?("snapshot", done, total) }
        }
        guard rename(staging.appendingPathComponent(dataFileName).path, dataFile.path) == 0,
            chmod(dataFile.path, 0o600) == 0
        else { throw FileAccess.failure("move the snapshot to", dataFile.path, errno) }
    }

    /// What a restore did.
    public struct RestoreReport: Sendable {
        /// The directory of the restored store's key files.
        public var keyDirectory: URL
        /// The key files were written there from the backup (it had them, the directory had none).
        public var keysRestored: Bool
        public var head: LogHead
        public var root: [UInt8]
        public var origin: String
        /// The restored store's full verification.
        public var verification: ReplayReport
    }

    /// Restores the backup in `backup` into a new store directory `target` (missing or empty; it may
    /// already hold the key files when `keyDirectory` is `target`), its key files in `keyDirectory`.
    ///
    /// The keys: those in `keyDirectory` when it holds them (the backup's, if it has any, must be the
    /// same files); else the backup's (taken with `--include-keys`), written into `keyDirectory`.
    /// Refused (``BackupError``, nothing written) unless the checkpoint is signed by that signing key
    /// (another ledger's key: ``BackupError/keys(_:)``; an altered checkpoint:
    /// ``BackupError/doesNotVerify(_:)``), `data.mdb` has the size and SHA-256 the checkpoint signed
    /// (checked on the staged copy, before LMDB reads it), the ledger key is the one the store was
    /// created with (``LedgerStoreError/wrongKey(path:)``), and the copy verifies in full with the
    /// checkpoint's head and root. Only then is `data.mdb` moved into `target`. `progress` gets
    /// (stage, done, total): `copy` in bytes, then `verify` in records.
    public static func restore(
        from backup: URL, to target: URL, keyDirectory: URL, progress: ((String, UInt64, UInt64) -> Void)? = nil
    ) throws -> RestoreReport {
        guard try FileAccess.exists(backup.path) else { throw BackupError.missing("there is no backup at \(backup.path)") }
        let keysInTarget = keyDirectory.standardizedFileURL.path == target.standardizedFileURL.path
        let created = try prepareEmptyDirectory(
            target, role: "the restore target", allowed: keysInTarget ? [LedgerKeys.fileName, SigningKey.fileName] : [],
            staging: stagingDirectoryName)
        let staging = target.appendingPathComponent(stagingDirectoryName)
        do {
            let (keySource, keysRestored) = try keySource(backup: backup, keyDirectory: keyDirectory)
            let signed = try signedCheckpoint(in: backup, keySource: keySource)
            guard mkdir(staging.path, 0o700) == 0 else { throw FileAccess.failure("create the directory", staging.path, errno) }
            let staged = staging.appendingPathComponent(dataFileName)
            let source = backup.appendingPathComponent(dataFileName)
            guard try FileAccess.exists(source.path) else {
                throw BackupError.doesNotVerify("the backup \(backup.path) has no \(dataFileName)")
            }
            progress?("copy", 0, UInt64(signed.data.bytes))
            try FileAccess.copyFile(source, to: staged)
            let (bytes, digest) = try FileAccess.sha256(ofFile: staged.path)
            progress?("copy", UInt64(bytes), UInt64(bytes))
            guard bytes == signed.data.bytes else {
                throw BackupError.doesNotVerify(
                    "\(source.path) is \(bytes) bytes, the backup's checkpoint signed \(signed.data.bytes): it was \(bytes < signed.data.bytes ? "truncated" : "altered")"
                )
            }
            guard digest == signed.data.sha256 else {
                throw BackupError.doesNotVerify(
                    "\(source.path) is not the file the backup's checkpoint signed (SHA-256 \(digest.hex), signed \(signed.data.sha256.hex)): it was damaged or altered"
                )
            }
            let (verification, head, stateHash) = try {
                let store = try LedgerStore(opening: staging, keyDirectory: keySource)
                _ = try store.signer()
                let verification = try store.replay(
                    progress: progress.map { report in { report("verify", $0, $1) } },
                    vaultProgress: progress.map { report in { report("identity vault", $0, $1) } })
                let (head, stateHash) = try store.read { reader in (try reader.head(), try Forensics.persistedStateHash(reader)) }
                return (verification, head, stateHash)
            }()
            let root = try MerkleLog.root(frontier: head.frontier, hasher: LogHasher()).bytes
            let checkpoint = signed.checkpoint
            guard verification.isIntact else {
                throw BackupError.doesNotVerify("the backup's copy has \(summary(of: verification))")
            }
            let states = checkpoint.extensions.compactMap(Forensics.parseStateLine).filter { $0.version == StateProjection.version }
            guard head.sequence == checkpoint.size, root == checkpoint.rootHash, states.allSatisfy({ $0.hash == stateHash }) else {
                throw BackupError.doesNotVerify(
                    "the backup's copy (\(head.sequence) records) is not the log its checkpoint signed (\(checkpoint.size) records)")
            }
            KillPoint.reached("restore-verified")
            if keysRestored { try LedgerStore.installKeyFiles(try LedgerStore.keyFiles(in: backup), in: keyDirectory) }
            KillPoint.reached("restore-keys")
            for name in ["lock.mdb", "ledger.lock"] { unlink(staging.appendingPathComponent(name).path) }
            let restored = target.appendingPathComponent(dataFileName)
            guard rename(staged.path, restored.path) == 0 else { throw FileAccess.failure("move \(staged.path) to", restored.path, errno) }
            guard rmdir(staging.path) == 0 else { throw FileAccess.failure("remove", staging.path, errno) }
            try FileAccess.sync(target)
            return RestoreReport(
                keyDirectory: keyDirectory, keysRestored: keysRestored, head: head, root: root, origin: checkpoint.origin,
                verification: verification)
        } catch {
            for name in [dataFileName, "lock.mdb", "ledger.lock"] { unlink(staging.appendingPathComponent(name).path) }
            rmdir(staging.path)
            if created { rmdir(target.path) }
            throw error
        }
    }

    /// Where the keys to restore with are, and whether they come from the backup: `keyDirectory` when it
    /// holds the key files (the backup's, if any, must be the same), else the backup's.
    static func keySource(backup: URL, keyDirectory: URL) throws -> (URL, fromBackup: Bool) {
        let held = try LedgerStore.keyFileNames(in: keyDirectory)
        let inBackup = try LedgerStore.keyFileNames(in: backup)
        if inBackup.count == 1 {
            throw BackupError.doesNotVerify("the backup \(backup.path) holds \(inBackup[0]) without the other key file: it is incomplete")
        }
        switch held.count {
        case 2:
            if inBackup.count == 2, try LedgerStore.keyFiles(in: backup) != LedgerStore.keyFiles(in: keyDirectory) {
                throw BackupError.keys(
                    "the key files in the backup \(backup.path) are not the ones in \(keyDirectory.path): they belong to different ledgers; give the key directory of the ledger this backup was taken of"
                )
            }
            return (keyDirectory, false)
        case 1:
            throw BackupError.keys(
                "\(keyDirectory.path) holds \(held[0]) without the other key file: a ledger needs both ledger.key and ledger-signing.key")
        default:
            guard inBackup.count == 2 else {
                throw BackupError.keys(
                    "the backup \(backup.path) holds no key files (it was taken without --include-keys) and \(keyDirectory.path) has none: give the ledger's key directory with --keys DIR (or LEDGER_KEYS)"
                )
            }
            return (backup, true)
        }
    }

    /// The backup's checkpoint, checked against the signing key in `keySource`, and its data line.
    static func signedCheckpoint(in backup: URL, keySource: URL) throws -> (checkpoint: Checkpoint, data: (bytes: Int, sha256: [UInt8])) {
        let file = backup.appendingPathComponent(checkpointFileName)
        guard try FileAccess.exists(file.path) else {
            throw BackupError.doesNotVerify(
                "\(backup.path) has no \(checkpointFileName): it is not a backup, or `ledger backup` did not finish (it writes the checkpoint once the copy verified)"
            )
        }
        let text = String(decoding: try FileAccess.read(file.path, limit: 64 << 10), as: UTF8.self)
        let parsed: Checkpoint
        do {
            parsed = try Checkpoint.parse(text).checkpoint
        } catch let error as CheckpointError {
            throw BackupError.doesNotVerify("\(file.path) is not a signed checkpoint: \(error)")
        }
        let publicKey = try SigningKey.load(from: keySource.appendingPathComponent(SigningKey.fileName)).publicKey
        let origin = try Forensics.origin(for: publicKey)
        guard parsed.origin == origin else {
            throw BackupError.keys(
                "the backup is of the ledger \(parsed.origin), but the signing key in \(keySource.path) is \(origin)'s: give the key directory of the ledger this backup was taken of"
            )
        }
        do {
            _ = try Checkpoint.verify(text, publicKey: publicKey, keyName: origin)
        } catch let error as CheckpointError {
            throw BackupError.doesNotVerify("\(file.path) is not validly signed by \(origin) (\(error)): it was altered")
        }
        let lines = parsed.extensions.compactMap(parseDataLine)
        guard lines.count == 1, let data = lines.first else {
            throw BackupError.doesNotVerify(
                "\(file.path) does not name one backup data file (a `\(dataLinePrefix)…` line): it is not a backup's checkpoint")
        }
        return (parsed, data)
    }

    /// Makes `directory` an empty directory of mode 0700, creating it (and its parents) when missing; true
    /// when created. Refused when it exists holding anything but the names in `allowed`; holding
    /// `staging` (the restore's own staging directory) as the leftover of an interrupted restore.
    static func prepareEmptyDirectory(_ directory: URL, role: String, allowed: Set<String>, staging: String? = nil) throws -> Bool {
        guard try FileAccess.exists(directory.path) else {
            try FileAccess.createDirectories(directory)
            return true
        }
        let unexpected: [String]
        do {
            unexpected = try FileAccess.entries(of: directory.path).filter { !allowed.contains($0) }
        } catch LedgerStoreError.fileAccess(_, _, ENOTDIR) {
            throw BackupError.targetInUse("\(role) \(directory.path) exists and is not a directory")
        }
        if let staging, unexpected.contains(staging) {
            throw LedgerStoreError.interruptedCopy(
                command: "restore", staging: directory.appendingPathComponent(staging).path,
                storeInPlace: unexpected.contains(dataFileName))
        }
        if unexpected.contains(dataFileName) {
            throw BackupError.targetInUse(
                "\(role) \(directory.path) already holds a ledger (data.mdb): it is never overwritten; choose a new directory")
        }
        guard unexpected.isEmpty else {
            let shown = unexpected.prefix(5).joined(separator: ", ") + (unexpected.count > 5 ? ", …" : "")
            throw BackupError.targetInUse("\(role) \(directory.path) is not empty (it holds \(shown)): choose a new or empty directory")
        }
        guard chmod(directory.path, 0o700) == 0 else { throw FileAccess.failure("set the mode of", directory.path, errno) }
        return false
    }

    /// What a replay found wrong, in a few words.
    static func summary(of report: ReplayReport) -> String {
        var problems: [String] = []
        if let fault = report.chainFault { problems.append("hash chain: \(fault)") }
        if !report.violations.isEmpty { problems.append("\(report.violations.count) invariant violations") }
        if !report.readModelDifferences.isEmpty { problems.append("\(report.readModelDifferences.count) read-model differences") }
        if !report.indexDifferences.isEmpty { problems.append("\(report.indexDifferences.count) index differences") }
        if !report.vaultDifferences.isEmpty { problems.append("an inconsistent identity vault: \(report.vaultDifferences[0])") }
        return problems.joined(separator: "; ")
    }
}

/// Why a backup or a restore was refused. Nothing was written: a refused backup leaves its directory as
/// it was, a refused restore leaves no store.
public enum BackupError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The directory to write to already holds something (a backup goes into a new or empty directory;
    /// a restore never overwrites a store).
    case targetInUse(String)
    /// The backup is incomplete, damaged or altered, or a copy does not verify.
    case doesNotVerify(String)
    /// The keys given are not the backup's ledger's, or there are none.
    case keys(String)
    /// There is no backup where one was named.
    case missing(String)

    public var description: String {
        switch self {
        case .targetInUse(let message), .keys(let message), .missing(let message): message
        case .doesNotVerify(let message): "the backup does not verify: \(message)"
        }
    }
}
