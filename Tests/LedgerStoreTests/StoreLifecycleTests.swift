import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@testable import LedgerStore

/// The signing key is recorded at creation and never silently replaced.
@Suite struct SigningKeyRecordTests {
    let directory = TemporaryDirectory()
    var storeURL: URL { directory.path("store") }
    var keyFile: URL { directory.path("store/\(SigningKey.fileName)") }

    func recorded(_ store: LedgerStore) throws -> [UInt8]? {
        try store.read { try $0.meta(.signingKey) }
    }

    /// As a store created before signing keys existed: nothing recorded.
    func forgetSigningKey(_ store: LedgerStore) throws {
        try store.lmdbEngine.withWriteAccess { access in
            _ = try Array(MetaKey.signingKey.rawValue.utf8).withUnsafeBytes { try access.txn.delete(access.db.meta, $0) }
        }
    }

    @Test func createRecordsTheFingerprintOfTheSigningKey() throws {
        defer { directory.remove() }
        let store = try LedgerStore.create(at: storeURL, configuration: [])
        let key = try SigningKey.load(from: keyFile)
        #expect(try recorded(store) == Digest.sha256(key.publicKey.rawRepresentation))
        #expect(try store.signingKey().publicKey == key.publicKey)
        let names = try FileManager.default.contentsOfDirectory(atPath: storeURL.path)
        #expect(!names.contains { $0.hasSuffix(".partial") }, "\(names)")
        for name in [LedgerKeys.fileName, SigningKey.fileName] {
            let attributes = try FileManager.default.attributesOfItem(atPath: directory.path("store/\(name)").path)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
        }
    }

    @Test func aMissingSigningKeyIsRefusedNotReplaced() throws {
        defer { directory.remove() }
        let store = try LedgerStore.create(at: storeURL, configuration: [])
        try FileManager.default.removeItem(at: keyFile)
        #expect(throws: LedgerStoreError.missingSigningKey(path: keyFile.path)) { try store.signingKey() }
        #expect(!FileManager.default.fileExists(atPath: keyFile.path), "no new key was created")
        let message = LedgerStoreError.missingSigningKey(path: keyFile.path).description
        #expect(message.contains("is missing: restore it from your backup (checkpoints and dispute bundles were signed with it"))
    }

    @Test func aDifferentSigningKeyIsRefused() throws {
        defer { directory.remove() }
        let store = try LedgerStore.create(at: storeURL, configuration: [])
        let original = try SigningKey.load(from: keyFile)
        try FileManager.default.removeItem(at: keyFile)
        let other = try SigningKey.create(at: keyFile)
        let expected = LedgerStoreError.wrongSigningKey(
            path: keyFile.path, recorded: try Digest.sha256(original.publicKey.rawRepresentation).hex,
            found: try Digest.sha256(other.publicKey.rawRepresentation).hex)
        #expect(throws: expected) { try store.signingKey() }
        #expect(expected.description.contains("does not match the signing key this store recorded"))
        #expect(expected.code == "signing-key-file")
        // Putting the original back repairs it.
        try FileManager.default.removeItem(at: keyFile)
        let fd = open(keyFile.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        #expect(fd >= 0)
        _ = Array(original.pem.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        #expect(try store.signingKey().publicKey == original.publicKey)
    }

    @Test func aStoreWithoutARecordedKeyCreatesOneAndRecordsIt() throws {
        defer { directory.remove() }
        let store = try LedgerStore.create(at: storeURL, configuration: [])
        // As a store created before signing keys existed: no file, nothing recorded.
        try forgetSigningKey(store)
        try FileManager.default.removeItem(at: keyFile)
        let created = try store.signingKey()
        #expect(FileManager.default.fileExists(atPath: keyFile.path))
        #expect(try recorded(store) == Digest.sha256(created.publicKey.rawRepresentation))
        // From then on it is protected like any other.
        try FileManager.default.removeItem(at: keyFile)
        #expect(throws: LedgerStoreError.missingSigningKey(path: keyFile.path)) { try store.signingKey() }
    }

    @Test func aStoreWithAKeyFileButNoRecordAdoptsTheFile() throws {
        defer { directory.remove() }
        let store = try LedgerStore.create(at: storeURL, configuration: [])
        try forgetSigningKey(store)
        let file = try SigningKey.load(from: keyFile)
        #expect(try store.signingKey().publicKey == file.publicKey)
        #expect(try recorded(store) == Digest.sha256(file.publicKey.rawRepresentation))
    }

    @Test func theCLIRefusesToSignWithAMissingKeyWithExitCode3() throws {
        defer { directory.remove() }
        _ = try Ledger.initialize(at: storeURL, configuration: Fixtures.configuration)
        #expect(try LedgerBinary.run(["checkpoint", "--store", storeURL.path]).status == 0)
        try FileManager.default.removeItem(at: keyFile)
        for arguments in [["checkpoint"], ["signing-key"]] {
            let result = try LedgerBinary.run(arguments + ["--store", storeURL.path])
            #expect(result.status == 3)
            #expect(result.stderr.contains("the ledger signing key file \(keyFile.path) is missing: restore it from your backup"), "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: keyFile.path))
        // Commands that do not sign still work.
        #expect(try LedgerBinary.run(["verify", "--store", storeURL.path]).status == 0)
    }
}

/// An interrupted `init` is reported as such by `init` and by every other command.
@Suite struct InterruptedInitTests {
    let directory = TemporaryDirectory()
    var storeURL: URL { directory.path("store") }

    func expectIncomplete(_ detail: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let expected = LedgerStoreError.incompleteInit(directory: storeURL.path, detail: detail)
        #expect(throws: expected, sourceLocation: sourceLocation) { try LedgerStore.create(at: storeURL, configuration: []) }
        #expect(throws: expected, sourceLocation: sourceLocation) { try LedgerStore(opening: storeURL) }
        #expect(throws: expected, sourceLocation: sourceLocation) { try LedgerStore.compact(at: storeURL) }
        let text = "\(storeURL.path) holds an incomplete ledger from an interrupted init ("
        let initialized = try LedgerBinary.run(["init", "--bundle-id", "b", "--environment", "Sandbox", "--store", storeURL.path])
        #expect(initialized.status == 3, sourceLocation: sourceLocation)
        #expect(initialized.stderr.contains(text), "\(initialized.stderr)", sourceLocation: sourceLocation)
        #expect(initialized.stderr.contains("): remove it and run init again"), sourceLocation: sourceLocation)
        let logged = try LedgerBinary.run(["log", "--store", storeURL.path])
        #expect(logged.status == 3, sourceLocation: sourceLocation)
        #expect(logged.stderr.contains(text), "\(logged.stderr)", sourceLocation: sourceLocation)
    }

    @Test func aKeyFileWithoutDataIsAnInterruptedInit() throws {
        defer { directory.remove() }
        try FileManager.default.createDirectory(at: storeURL, withIntermediateDirectories: true)
        _ = try LedgerKeys.create(at: storeURL.appendingPathComponent(LedgerKeys.fileName))
        try expectIncomplete("ledger.key without data.mdb; if data.mdb was lost rather than never written, restore it from your backup instead")
        // Nothing was deleted or added.
        let names = try FileManager.default.contentsOfDirectory(atPath: storeURL.path).filter { $0 != StoreLock.fileName }
        #expect(names == [LedgerKeys.fileName])
    }

    @Test func partialKeyFilesAreAnInterruptedInit() throws {
        defer { directory.remove() }
        _ = try LedgerStore.create(at: storeURL, configuration: [])
        // As if init stopped between the metadata commit and renaming the signing key into place.
        let signing = storeURL.appendingPathComponent(SigningKey.fileName)
        #expect(rename(signing.path, signing.path + ".partial") == 0)
        try expectIncomplete("ledger-signing.key.partial left over")
        #expect(FileManager.default.fileExists(atPath: signing.path + ".partial"))
        #expect(rename(signing.path + ".partial", signing.path) == 0)
        _ = try LedgerStore(opening: storeURL)
    }

    @Test func dataWithoutMetadataIsAnInterruptedInit() throws {
        defer { directory.remove() }
        try FileManager.default.createDirectory(at: storeURL, withIntermediateDirectories: true)
        _ = try LedgerKeys.create(at: storeURL.appendingPathComponent(LedgerKeys.fileName))
        // An LMDB environment with no metadata: an older init stopped before its metadata commit.
        _ = try LMDBEnvironment(path: storeURL.path, databases: LMDBEngine.specs, initialMapSize: 1 << 20)
        try expectIncomplete(LedgerStore.noMetadata)
    }

    @Test func aCompleteStoreIsStillAlreadyInitializedAndAnEmptyDirectoryNotInitialized() throws {
        defer { directory.remove() }
        #expect(throws: LedgerStoreError.notInitialized(directory: storeURL.path)) { try LedgerStore(opening: storeURL) }
        try createAndInitAgainWhileOpen()
        // And when nobody has it open.
        #expect(throws: LedgerStoreError.alreadyInitialized(directory: storeURL.path)) {
            try LedgerStore.create(at: storeURL, configuration: [])
        }
        let again = try LedgerBinary.run(["init", "--bundle-id", "b", "--environment", "Sandbox", "--store", storeURL.path])
        #expect(again.status == 3)
        #expect(again.stderr.contains("already holds a ledger"), "\(again.stderr)")
    }

    /// While the store is open, init (here and in another process) still says it holds a ledger.
    func createAndInitAgainWhileOpen() throws {
        let store = try LedgerStore.create(at: storeURL, configuration: [])
        #expect(throws: LedgerStoreError.alreadyInitialized(directory: storeURL.path)) {
            try LedgerStore.create(at: storeURL, configuration: [])
        }
        let again = try LedgerBinary.run(["init", "--bundle-id", "b", "--environment", "Sandbox", "--store", storeURL.path])
        #expect(again.stderr.contains("already holds a ledger"), "\(again.stderr)")
        #expect(try store.head().sequence == 0)
    }

    /// Key files written as `.partial` by an init still running (which holds the store's lock) make a
    /// second init "busy", not "interrupted" (seen once in 15 concurrent inits); once no process holds
    /// the lock, the same files are an interrupted init.
    @Test func partialKeyFilesOfAnInitStillRunningAreBusyNotInterrupted() throws {
        let directory = TemporaryDirectory("ledger-init-race")
        defer { directory.remove() }
        let storeURL = directory.path("store")
        try FileManager.default.createDirectory(at: storeURL, withIntermediateDirectories: true)
        try Data("partial".utf8).write(to: storeURL.appendingPathComponent("ledger.key.partial"))
        do {
            let creating = try StoreLock(directory: storeURL, mode: .exclusive, busy: .storeBusy(directory: storeURL.path))
            #expect(throws: LedgerStoreError.storeBusy(directory: storeURL.path)) {
                _ = try LedgerStore.create(at: storeURL, configuration: [])
            }
            withExtendedLifetime(creating) {}
        }
        #expect {
            _ = try LedgerStore.create(at: storeURL, configuration: [])
        } throws: { error in
            if case LedgerStoreError.incompleteInit = error { true } else { false }
        }
    }
}

/// `compact` rewrites data.mdb with live pages only, and only when nobody else has the store open.
@Suite struct CompactionTests {
    let t = Fixtures.start

    func purchase(_ ledger: Ledger, uid: String, _ originalTransactionId: String) throws {
        let payload = try Fixtures.payload(Fixtures.transaction(originalTransactionId, at: t))
        _ = try ledger.submit(.transaction(.purchase, uid: uid, payload, .trustedDecoded), at: t)
    }

    /// Occurrences of the vault entry `w ‖ pseudonym` (the bound sealed UID's key) as an LMDB leaf node
    /// key (preceded by its 16-bit key size, 17, little-endian), so a pseudonym that merely follows a
    /// 0x77 byte in a record does not count.
    func vaultKeyOccurs(_ account: AccountID, in file: URL) throws -> Bool {
        let data = try Data(contentsOf: file)
        return data.range(of: Data([17, 0, LMDBAccess.boundSealedPrefix] + account.bytes)) != nil
    }

    /// What must survive compaction.
    struct Snapshot {
        var pseudonyms: [AccountID]
        var head: LogHead
        var records: [[UInt8]]
        var entries: [[UInt8]]
        var bindings: [BindingView]
        var signingKey: Ed25519PublicKey
    }

    static let deleted = (1...6).map { "deleted-\($0)" }
    static let kept = (1...4).map { "kept-\($0)" }
    static let lineages = (0..<(deleted.count + kept.count)).map { "\(3000 + $0)" }

    func storedRecords(_ store: LedgerStore) throws -> [[UInt8]] {
        try store.read { reader in
            var stored: [[UInt8]] = []
            try reader.forEachRecord(from: 1, through: .max) { _, bytes in
                stored.append(Array(bytes))
                return true
            }
            return stored
        }
    }

    func readModelEntries(_ store: LedgerStore) throws -> [[UInt8]] {
        try store.read { reader in
            var entries: [[UInt8]] = []
            try reader.forEachReadModel(from: []) { key, value in
                entries += [key, value]
                return true
            }
            return entries
        }
    }

    /// Creates a ledger, deletes some accounts, checks that compaction is refused while it is open,
    /// and returns what must survive; the ledger is closed when this returns.
    func populate(_ storeURL: URL) throws -> Snapshot {
        let ledger = try Ledger.initialize(at: storeURL, configuration: Fixtures.configuration)
        let dataFile = storeURL.appendingPathComponent("data.mdb")
        for (uid, lineage) in zip(Self.deleted + Self.kept, Self.lineages) { try purchase(ledger, uid: uid, lineage) }
        let pseudonyms = try ledger.store.read { reader in try Self.deleted.compactMap { try ledger.store.pseudonym(ofUID: $0, in: reader) } }
        #expect(pseudonyms.count == Self.deleted.count)
        #expect(try pseudonyms.allSatisfy { try vaultKeyOccurs($0, in: dataFile) })
        for uid in Self.deleted { _ = try ledger.submit(.deleteAccount(uid: uid), at: t + Fixtures.day) }
        #expect(try ledger.store.read { reader in try Self.deleted.allSatisfy { try ledger.store.pseudonym(ofUID: $0, in: reader) == nil } })
        // Erased logically, but LMDB's copy-on-write leaves the old vault pages in the file.
        let lingering = try pseudonyms.filter { try vaultKeyOccurs($0, in: dataFile) }
        #expect(!lingering.isEmpty, "expected stale pages to hold erased vault entries before compaction")

        // Refused while this process has the store open, from another process too.
        #expect(throws: LedgerStoreError.storeInUse(directory: storeURL.path)) { try LedgerStore.compact(at: storeURL) }
        let refused = try LedgerBinary.run(["compact", "--store", storeURL.path])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("is in use by another process"), "\(refused.stderr)")
        return Snapshot(
            pseudonyms: pseudonyms, head: try ledger.store.head(), records: try storedRecords(ledger.store),
            entries: try readModelEntries(ledger.store),
            bindings: try Self.lineages.map { try ledger.binding(originalTransactionId: $0) }, signingKey: try ledger.signer().publicKey)
    }

    @Test func compactionPurgesErasedIdentitiesAndKeepsEverythingElse() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let storeURL = directory.path("store")
        let dataFile = storeURL.appendingPathComponent("data.mdb")
        let before = try populate(storeURL)

        let compacted = try LedgerBinary.run(["compact", "--store", storeURL.path])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        #expect(compacted.json["bytesBefore"] as? Int ?? 0 > 0)
        #expect(compacted.json["bytesAfter"] as? Int ?? 0 > 0)
        #expect(compacted.json["store"] as? String == storeURL.path)
        for account in before.pseudonyms { #expect(try !vaultKeyOccurs(account, in: dataFile)) }
        #expect(!FileManager.default.fileExists(atPath: storeURL.appendingPathComponent(LedgerStore.compactionDirectoryName).path))
        let attributes = try FileManager.default.attributesOfItem(atPath: dataFile.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)

        let ledger = try Ledger(opening: storeURL)
        #expect(try ledger.store.replay().isIntact)
        let head = try ledger.store.head()
        #expect(head == before.head)
        #expect(try storedRecords(ledger.store) == before.records)
        #expect(try readModelEntries(ledger.store) == before.entries)
        #expect(try Self.lineages.map { try ledger.binding(originalTransactionId: $0) } == before.bindings)
        for (uid, lineage) in zip(Self.kept, Self.lineages.dropFirst(Self.deleted.count)) {
            #expect(try ledger.binding(originalTransactionId: lineage).uid == uid)
        }
        #expect(try ledger.signer().publicKey == before.signingKey)
        // The store keeps working: appends after compaction.
        try purchase(ledger, uid: "after", "4000")
        #expect(try ledger.binding(originalTransactionId: "4000").uid == "after")
        #expect(try ledger.store.replay().isIntact)
    }

    /// `ledger backup` copies live pages only: identities erased before it are not in the backup even
    /// while the store's own file still holds them in freed pages, and the store needs no compaction first.
    @Test func aBackupHoldsNoIdentityErasedBeforeIt() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let storeURL = directory.path("store")
        let before = try populate(storeURL)
        let backup = try LedgerBinary.run(["backup", "--store", storeURL.path, "--out", directory.path("backup").path])
        #expect(backup.status == 0, "\(backup.stderr)")
        let copy = directory.path("backup/data.mdb")
        #expect(try before.pseudonyms.contains { try vaultKeyOccurs($0, in: storeURL.appendingPathComponent("data.mdb")) })
        for account in before.pseudonyms { #expect(try !vaultKeyOccurs(account, in: copy)) }
        // The live accounts' sealed UIDs are in it, and the restored store answers for them.
        let restored = try LedgerBinary.run([
            "restore", "--from", directory.path("backup").path, "--to", directory.path("restored").path, "--keys", storeURL.path,
        ])
        #expect(restored.status == 0, "\(restored.stderr)")
        let ledger = try Ledger(opening: .directory(directory.path("restored"), keys: storeURL))
        for (uid, lineage) in zip(Self.kept, Self.lineages.dropFirst(Self.deleted.count)) {
            #expect(try ledger.binding(originalTransactionId: lineage).uid == uid)
        }
        #expect(try Self.lineages.map { try ledger.binding(originalTransactionId: $0) } == before.bindings)
    }

    func addOnePurchase(_ storeURL: URL) throws {
        let ledger = try Ledger.initialize(at: storeURL, configuration: Fixtures.configuration)
        try purchase(ledger, uid: "alice", "1")
    }

    @Test func compactionRefusesAnotherProcessAndOpeningIsRefusedDuringCompaction() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let storeURL = directory.path("store")
        try addOnePurchase(storeURL)
        // An environment opened without ledger.lock (like mdb_stat) is seen in LMDB's own lock file.
        do {
            let raw = try LMDBEnvironment(path: storeURL.path, databases: LMDBEngine.specs, initialMapSize: 16 << 20)
            let refused = try LedgerBinary.run(["compact", "--store", storeURL.path])
            #expect(refused.status == 3)
            #expect(refused.stderr.contains("is in use by another process"), "\(refused.stderr)")
            withExtendedLifetime(raw) {}
        }
        // While compact holds the lock, opening is refused with a clear error.
        do {
            let lock = try StoreLock(directory: storeURL, mode: .exclusive, busy: .storeInUse(directory: storeURL.path))
            #expect(throws: LedgerStoreError.storeBusy(directory: storeURL.path)) { try LedgerStore(opening: storeURL) }
            let refused = try LedgerBinary.run(["log", "--store", storeURL.path])
            #expect(refused.status == 3)
            #expect(refused.stderr.contains("compacting or creating it"), "\(refused.stderr)")
            withExtendedLifetime(lock) {}
        }
        let result = try LedgerStore.compact(at: storeURL)
        #expect(result.bytesAfter <= result.bytesBefore)
        #expect(try Ledger(opening: storeURL).binding(originalTransactionId: "1").uid == "alice")
        #expect(throws: LedgerStoreError.notInitialized(directory: directory.path("nothing").path)) {
            try LedgerStore.compact(at: directory.path("nothing"))
        }
    }
}
