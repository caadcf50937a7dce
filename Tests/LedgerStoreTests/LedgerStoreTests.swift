import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@testable import LedgerStore

enum RecordFixtures {
    static let someAccount = AccountID([UInt8](repeating: 1, count: 16)) ?? AccountID(Array(repeating: 2, count: 16)).unsafelyUnwrapped
}

@Suite struct LedgerStoreTests {
    let directory = TemporaryDirectory()

    func newStore() throws -> LedgerStore { try LedgerStore.create(at: directory.path("store"), configuration: [1, 2, 3]) }

    func event(_ index: Int, lineage: LineageKey? = nil, product: String = "com.myrecipes.premium.monthly") throws -> PendingEvent {
        let lineage = try lineage ?? LineageKey(Digest32(Digest.sha256(Array("lineage-\(index)".utf8))) ?? .zero)
        let account = try AccountID(Array(Digest.sha256(Array("account-\(index)".utf8)).prefix(16)))
        return PendingEvent(
            eventId: Digest32(try Digest.sha256(Array("event-\(index)".utf8))) ?? .zero, recordedAt: 1_000 + Int64(index),
            event: .entitlementGranted(
                EntitlementGranted(
                    lineage: lineage, account: account ?? RecordFixtures.someAccount, productId: product,
                    expiresAt: 5_000)))
    }

    @Test func appendAssignsGaplessSequencesAndChainsHashes() throws {
        let store = try newStore()
        defer { directory.remove() }
        let first = try store.append([event(1), event(2)])
        let second = try store.append([event(3)])
        #expect(first == AppendResult(sequences: [1, 2], appended: true))
        #expect(second == AppendResult(sequences: [3], appended: true))
        let records = try store.records()
        #expect(records.map(\.sequence) == [1, 2, 3])
        #expect(records[0].previousHash == .zero)
        #expect(records[1].previousHash == records[0].hash)
        #expect(records[2].previousHash == records[1].hash)
        #expect(try store.head().hash == records[2].hash)
        #expect(try store.replay().chainFault == nil)
    }

    @Test func reappendingTheSameEventsReturnsTheOriginalSequencesAndAppendsNothing() throws {
        let store = try newStore()
        defer { directory.remove() }
        try store.append([event(1), event(2)])
        let again = try store.append([event(1), event(2)])
        #expect(again == AppendResult(sequences: [1, 2], appended: false))
        #expect(try store.head().sequence == 2)
    }

    @Test func reappendingAnEventIdWithDifferentContentIsAConflict() throws {
        let store = try newStore()
        defer { directory.remove() }
        try store.append([event(1)])
        var changed = try event(1, product: "com.myrecipes.premium.yearly")
        changed.recordedAt = 9
        #expect(throws: LedgerStoreError.conflictingEvent(eventId: changed.eventId, sequence: 1)) {
            try store.append([changed])
        }
        #expect(try store.head().sequence == 1)
    }

    @Test func staleLineageVersionIsRejectedAndAppendsNothing() throws {
        let store = try newStore()
        defer { directory.remove() }
        let lineage = LineageKey(Digest32([UInt8](repeating: 7, count: 32)) ?? .zero)
        let version = try store.read { try $0.lineageVersion(lineage) }
        #expect(version == 0)
        try store.append([event(1, lineage: lineage)], expectedVersions: [lineage: 0])
        #expect(throws: LedgerStoreError.staleLineageVersion(lineage: lineage, expected: 0, actual: 1)) {
            try store.append([event(2, lineage: lineage)], expectedVersions: [lineage: 0])
        }
        try store.append([event(3, lineage: lineage)], expectedVersions: [lineage: 1])
        #expect(try store.read { try $0.sequences(ofLineage: lineage) } == [1, 2])
    }

    @Test func theMapGrowsWhenItFills() throws {
        let store = try LedgerStore.create(at: directory.path("store"), configuration: [], initialMapSize: 1 << 20)
        defer { directory.remove() }
        let before = store.environment.mapSize
        let big = String(repeating: "x", count: 20_000)
        for batch in 0..<20 {
            try store.append((0..<50).map { try event(batch * 50 + $0, product: big) })
        }
        #expect(store.environment.mapSize > before)
        #expect(try store.head().sequence == 1_000)
        #expect(try store.replay().chainFault == nil)
    }

    @Test func aFlippedByteIsReportedWithItsSequenceNumber() throws {
        let store = try newStore()
        try store.append((1...5).map { try event($0, product: "product-\($0)-marker") })
        let dataFile = directory.path("store/data.mdb")
        var data = try Data(contentsOf: dataFile)
        // Flip the marker wherever LMDB keeps a copy of the page (old copies linger in free pages).
        try Fixtures.flipEveryOccurrence(of: "product-3-marker", in: &data)
        try data.write(to: dataFile)
        let reopened = try LedgerStore(opening: directory.path("store"))
        let report = try reopened.replay()
        #expect(report.chainFault?.sequence == 3)
        #expect(report.verifiedRecords == 2)
        directory.remove()
    }

    @Test func openingRefusesAMissingOrWorldReadableKey() throws {
        _ = try newStore()
        defer { directory.remove() }
        let key = directory.path("store/ledger.key")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key.path)
        #expect(throws: LedgerStoreError.keyReadableByOthers(path: key.path, mode: 0o644)) {
            try LedgerStore(opening: directory.path("store"))
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key.path)
        _ = try LedgerStore(opening: directory.path("store"))
        try FileManager.default.removeItem(at: key)
        #expect(throws: LedgerStoreError.missingKey(path: key.path)) { try LedgerStore(opening: directory.path("store")) }
        #expect(throws: LedgerStoreError.notInitialized(directory: directory.path("nothing").path)) {
            try LedgerStore(opening: directory.path("nothing"))
        }
    }

    @Test func theKeyFileIsCreatedWithMode0600() throws {
        _ = try newStore()
        defer { directory.remove() }
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.path("store/ledger.key").path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }

    @Test func aStoreOfANewerFormatIsRefused() throws {
        let store = try newStore()
        defer { directory.remove() }
        try store.environment.write { txn in try txn.put(LedgerStore.Database.meta, LedgerStore.Meta.formatVersion, u32Bytes(99)) }
        #expect(throws: LedgerStoreError.newerFormat(found: 99, supported: LedgerStore.formatVersion)) {
            try LedgerStore(opening: directory.path("store"))
        }
    }

    @Test func theIdentityVaultSealsUIDsAndForgetsThemOnErase() throws {
        let store = try newStore()
        defer { directory.remove() }
        let uid = "firebase-uid-SECRET-1234"
        let account = try store.write { try $0.pseudonym(forUID: uid) }
        #expect(try store.write { try $0.pseudonym(forUID: uid) } == account)
        #expect(try store.read { try $0.uid(of: account) } == uid)
        #expect(!Fixtures.anyFile(in: directory.url, contains: uid))
        try store.write { try $0.eraseIdentity(uid: uid) }
        #expect(try store.read { try $0.pseudonym(ofUID: uid) } == nil)
        #expect(try store.read { try $0.uid(of: account) } == nil)
        #expect(try store.write { try $0.pseudonym(forUID: uid) } != account)
    }

    @Test func lineageKeysAreKeyedHashesOfPlatformEnvironmentAndId() throws {
        let store = try newStore()
        defer { directory.remove() }
        let keys = store.keys
        let a = try keys.lineage(environment: "Production", originalTransactionId: "1000")
        #expect(try a == keys.lineage(environment: "Production", originalTransactionId: "1000"))
        #expect(try a != keys.lineage(environment: "Sandbox", originalTransactionId: "1000"))
        #expect(try a != keys.lineage(environment: "Production", originalTransactionId: "1001"))
        let other = try LedgerStore.create(at: directory.path("other"), configuration: [])
        #expect(try a != other.keys.lineage(environment: "Production", originalTransactionId: "1000"))
    }
}

@Suite struct LMDBEnvironmentTests {
    /// Many small transactions in a tiny map: the map fills both while writing and while
    /// committing (LMDB frees a transaction whose commit fails; it must not be aborted again).
    @Test func smallTransactionsGrowATinyMapWithoutLosingAWrite() throws {
        let directory = TemporaryDirectory("lmdb-grow")
        defer { directory.remove() }
        let environment = try LMDBEnvironment(path: directory.url.path, databaseNames: ["a", "b"], initialMapSize: 32 << 10)
        let start = environment.mapSize
        for index in 0..<3_000 {
            try environment.write { txn in
                try txn.put("a", u64Bytes(UInt64(index)), [UInt8](repeating: UInt8(index & 0xFF), count: 200))
                try txn.put("b", Array("key-\(index)".utf8), u64Bytes(UInt64(index)))
            }
        }
        #expect(environment.mapSize > start * 8)
        let (entries, last) = try environment.read { txn in
            (try txn.statistics("a").entries, try txn.get("b", Array("key-2999".utf8)))
        }
        #expect(entries == 3_000)
        #expect(last == u64Bytes(2_999))
    }
}

@Suite struct ReadModelRepairTests {
    /// A persisted read model that no longer matches the log is reported by verify and rebuild,
    /// and rebuild replaces it with the replayed one.
    @Test func rebuildReportsAndRepairsADifferingReadModel() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let t = Fixtures.start
        _ = try ledger.submit(.transaction(.purchase, uid: "alice", try Fixtures.payload(Fixtures.transaction("1", at: t)), .trustedDecoded), at: t)
        let lineage = try ledger.lineage(originalTransactionId: "1")
        // Rewrite the lineage's persisted state as unbound, behind the ledger's back.
        try ledger.store.environment.write { txn in
            try txn.put(LedgerStore.Database.readModels, ReadModel.lineageKey(lineage), [0, 0])
        }
        let damaged = try ledger.store.replay()
        #expect(damaged.chainFault == nil)
        #expect(damaged.readModelDifferences == ["lineage \(lineage.digest.hex): differs"])
        #expect(!damaged.isIntact)
        let checked = try ledger.store.rebuildReadModels(repair: false)
        #expect(checked.readModelDifferences.count == 1)
        #expect(try ledger.store.replay().readModelDifferences.count == 1, "--check changes nothing")
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.binding(originalTransactionId: "1").uid == "alice")
    }
}

@Suite struct WrongKeyTests {
    @Test func openingWithAnotherStoresKeyIsRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        _ = try LedgerStore.create(at: directory.path("a"), configuration: [])
        _ = try LedgerStore.create(at: directory.path("b"), configuration: [])
        let key = directory.path("a/ledger.key")
        try FileManager.default.removeItem(at: key)
        try FileManager.default.copyItem(at: directory.path("b/ledger.key"), to: key)
        #expect(throws: LedgerStoreError.wrongKey(path: key.path)) { try LedgerStore(opening: directory.path("a")) }
    }
}

@Suite struct ForeignStoreTests {
    /// Another program's LMDB store, or an emptied data.mdb, is refused and left unchanged by both
    /// `init` and opening.
    @Test func aForeignOrEmptyDataFileIsRefusedAndLeftUnchanged() throws {
        let directory = TemporaryDirectory("foreign")
        defer { directory.remove() }
        let foreign = directory.path("foreign")
        try FileManager.default.createDirectory(at: foreign, withIntermediateDirectories: true)
        do {
            let environment = try LMDBEnvironment(path: foreign.path, databaseNames: ["foo"], initialMapSize: 1 << 20)
            try environment.write { txn in try txn.put("foo", [1], [2]) }
        }
        let before = try Data(contentsOf: foreign.appendingPathComponent("data.mdb"))
        let store = foreign.path
        let opened = try LedgerBinary.run(["verify", "--store", store])
        #expect(opened.status == 3, "no key file, no ledger: \(opened.stderr)")
        // With a key file beside it, opening reaches the data file and still changes nothing.
        _ = try LedgerKeys.create(at: foreign.appendingPathComponent(LedgerKeys.fileName))
        let withKey = try LedgerBinary.run(["verify", "--store", store])
        #expect(withKey.status == 3)
        #expect(withKey.stderr.contains("no ledger metadata"), "\(withKey.stderr)")
        #expect(try Data(contentsOf: foreign.appendingPathComponent("data.mdb")) == before)
        try FileManager.default.removeItem(at: foreign.appendingPathComponent(LedgerKeys.fileName))
        let created = try LedgerBinary.run(["init", "--store", store, "--bundle-id", "a", "--environment", "Sandbox"])
        #expect(created.status == 3)
        #expect(created.stderr.contains("not a ledger"), "\(created.stderr)")
        #expect(try Data(contentsOf: foreign.appendingPathComponent("data.mdb")) == before)

        let emptied = directory.path("emptied")
        _ = try LedgerStore.create(at: emptied, configuration: [])
        try Data().write(to: emptied.appendingPathComponent("data.mdb"))
        let verify = try LedgerBinary.run(["verify", "--store", emptied.path])
        #expect(verify.status == 3)
        #expect(verify.stderr.contains("restore data.mdb"), "\(verify.stderr)")
        #expect(try Data(contentsOf: emptied.appendingPathComponent("data.mdb")).isEmpty)
    }
}
