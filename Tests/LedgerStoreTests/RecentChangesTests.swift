import CLMDB
import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// Storage format 3's recent-change regions (``Recent``): what a commit appends there is read by
/// every reader and every later writer, other processes included, and merges into the main trees
/// without changing an answer.
@Suite struct RecentChangesTests {
    let directory = TemporaryDirectory("ledger-recent")
    var storeURL: URL { directory.path("store") }
    let t = Fixtures.start

    func newLedger() throws -> Ledger {
        try Ledger.initialize(at: storeURL, configuration: Fixtures.configuration, clock: Fixtures.clock)
    }

    @discardableResult
    func submit(_ ledger: Ledger, _ kind: SubmissionKind, uid: String, _ lineage: String, at: Int64? = nil) throws -> Decision {
        let payload = try Fixtures.payload(Fixtures.transaction(lineage, at: at ?? t))
        return try ledger.submit(.transaction(kind, uid: uid, payload, .trustedDecoded), at: at ?? t)
    }

    /// Every entry of every region: (region, kind, key).
    func regionEntries(_ store: LedgerStore) throws -> [(Int, RecentKind, Key128)] {
        try store.lmdbEngine.withWriteAccess { access in
            let regions = try #require(access.recent)
            var entries: [(Int, RecentKind, Key128)] = []
            for region in 0..<Recent.regionCount {
                try access.forEachRecent(in: regions, region: region) { _, kind, key, _ in entries.append((region, kind, key)) }
            }
            return entries
        }
    }

    @Test func aNewStoreIsFormatThreeAndKeepsACommitsChangesInItsRegions() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        #expect(ledger.store.formatVersion == 3)
        // The commit also merges the next region in turn: a change whose key falls there (the keys
        // are keyed hashes under this store's random ledger key) is in the main trees already.
        let merged = try ledger.store.lmdbEngine.withWriteAccess { try $0.recentPosition().next }
        try submit(ledger, .purchase, uid: "uid-recent-1", "5000")
        let entries = try regionEntries(ledger.store)
        let lineage = try ledger.store.keys.lineage(environment: "Sandbox", originalTransactionId: "5000")
        let vaultKey = try ledger.store.keys.vaultKey(uid: "uid-recent-1")
        let lineageRegion = Recent.region(of: lineage.key)
        let vaultRegion = Recent.region(of: vaultKey)
        #expect(entries.allSatisfy { $0.0 != merged && $0.0 == Recent.region(of: $0.2) })
        if lineageRegion != merged {
            #expect(entries.contains { $0.0 == lineageRegion && $0.1 == .lineageEntry && $0.2 == lineage.key })
            #expect(entries.contains { $0.0 == lineageRegion && $0.1 == .readModel && $0.2 == lineage.key })
        }
        if vaultRegion != merged { #expect(entries.contains { $0.0 == vaultRegion && $0.1 == .vaultPut && $0.2 == vaultKey }) }
        #expect(entries.count == (lineageRegion == merged ? 0 : 2) + (vaultRegion == merged ? 0 : 1))
        #expect(try ledger.binding(originalTransactionId: "5000").uid == "uid-recent-1")
        let stats = try LedgerBinary.run(["stats", "--store", storeURL.path])
        #expect(stats.json["formatVersion"] as? Int == 3)
        #expect((stats.json["databases"] as? [String: Any])?["recent"] != nil)
    }

    /// The writer keeps its view of the regions between commits; another process's commit in between
    /// must be seen, or this process would bind a lineage the other bound, and issue a second
    /// pseudonym for an account the other created.
    @Test func aWriterSeesWhatAnotherProcessWroteInBetween() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        try submit(ledger, .purchase, uid: "uid-recent-a", "5000")
        let line = Fixtures.line([
            "id": "b1", "type": "purchase", "account": "uid-recent-b", "transaction": Fixtures.transaction("5001", at: t), "at": t,
        ])
        let other = try LedgerBinary.run(["submit", "--trust-decoded", "--store", storeURL.path], stdin: line + "\n")
        #expect(other.status == 0, "\(other.stderr)")
        #expect(other.stdout.contains("\"granted\""), "\(other.stdout)")

        let taken = try submit(ledger, .purchase, uid: "uid-recent-c", "5001", at: t + 60_000)
        #expect(taken.reason.outcome == .denied, "\(taken)")
        let owner = try submit(ledger, .restore, uid: "uid-recent-b", "5001", at: t + 120_000)
        #expect(owner.reason.outcome == .granted, "\(owner)")
        #expect(try ledger.binding(originalTransactionId: "5001").uid == "uid-recent-b")
        #expect(try ledger.store.replay().isIntact)
    }

    /// A retry decides nothing new, so its write transaction commits nothing and LMDB gives its id to
    /// the next commit, another process's: the writer must not take that commit for its own.
    @Test func aWriteThatCommitsNothingLeavesNoStaleViewBehind() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        try submit(ledger, .purchase, uid: "uid-recent-a", "5000")
        let engine = try ledger.store.lmdbEngine
        let line = Fixtures.line([
            "id": "b1", "type": "purchase", "account": "uid-recent-b", "transaction": Fixtures.transaction("5001", at: t), "at": t,
        ])
        var other: LedgerBinary.Result?
        engine.afterWriteForTesting = { [storeURL] in
            guard other == nil else { return }
            other = try? LedgerBinary.run(["submit", "--trust-decoded", "--store", storeURL.path], stdin: line + "\n")
        }
        let retry = try submit(ledger, .purchase, uid: "uid-recent-a", "5000")
        engine.afterWriteForTesting = nil
        #expect(retry.duplicate)
        #expect(other?.status == 0 && other?.stdout.contains("\"granted\"") == true, "\(other?.stderr ?? "not run")")

        let taken = try submit(ledger, .purchase, uid: "uid-recent-c", "5001", at: t + 60_000)
        #expect(taken.reason.outcome == .denied, "\(taken)")
        #expect(try ledger.binding(originalTransactionId: "5001").uid == "uid-recent-b")
        #expect(try ledger.store.replay().isIntact)
    }

    /// A damaged next serial in `meta` would make the regions refuse appends: the write fails as a
    /// damaged store and writes nothing, in this process (appending) and in a new one (loading the regions).
    @Test func aRecentPositionBehindTheRegionsIsDamageNotALostWrite() throws {
        defer { directory.remove() }
        let before: UInt64
        do {
            let ledger = try newLedger()
            try submit(ledger, .purchase, uid: "uid-recent-a", "5000")
            try ledger.store.lmdbEngine.withWriteAccess { access in
                let next = try access.recentPosition().next
                try access.putRecentPosition(serial: 1, next: next)
            }
            before = try ledger.store.head().sequence
            #expect {
                try submit(ledger, .purchase, uid: "uid-recent-b", "5001")
            } throws: { error in
                "\(error)".contains("recent-change position")
            }
            #expect(try ledger.store.head().sequence == before)
        }
        let line = Fixtures.line([
            "id": "c1", "type": "purchase", "account": "uid-recent-c", "transaction": Fixtures.transaction("5002", at: t), "at": t,
        ])
        let other = try LedgerBinary.run(["submit", "--trust-decoded", "--store", storeURL.path], stdin: line + "\n")
        #expect(other.status != 0 || !other.stdout.contains("\"granted\""), "\(other.stdout)")
        #expect(other.stderr.contains("recent-change position") || other.stdout.contains("recent-change position"), "\(other.stderr)")
        #expect(try LedgerStore(opening: storeURL).head().sequence == before)
    }

    /// More commits than regions: every region is merged at least once, answers and the replay's
    /// checks (indexes and read models against the records) stay the same, and a write that goes
    /// straight into the main trees (a repair's) merges every region first.
    @Test func mergingTheRegionsChangesNoAnswer() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        let count = Recent.regionCount * 2 + 10
        for index in 0..<count { try submit(ledger, .purchase, uid: "uid-recent-\(index)", "\(6000 + index)") }
        for index in stride(from: 0, to: count, by: 3) {
            try submit(ledger, .restore, uid: "uid-recent-\(index)", "\(6000 + index)", at: t + Fixtures.day)
        }
        let held = try regionEntries(ledger.store).count
        #expect(held > 0 && held < count * 3, "some changes merged, some still in their regions (\(held))")
        let bindings = try (0..<count).map { try ledger.binding(originalTransactionId: "\(6000 + $0)") }
        #expect(bindings.enumerated().allSatisfy { $0.element.uid == "uid-recent-\($0.offset)" })
        #expect(try ledger.store.replay().isIntact)

        try ledger.store.lmdbEngine.withWriteAccess { access in try access.putReadModels([]) }
        #expect(try regionEntries(ledger.store).isEmpty)
        #expect(try (0..<count).map { try ledger.binding(originalTransactionId: "\(6000 + $0)") } == bindings)
        #expect(try ledger.store.replay().isIntact)
        try submit(ledger, .restore, uid: "uid-recent-1", "6001", at: t + 2 * Fixtures.day)
        #expect(try ledger.binding(originalTransactionId: "6001").uid == "uid-recent-1")
    }

    /// A commit merges one region per ``Recent/entriesPerMerge`` entries it appends (at least one),
    /// in turn: a region holds about as many entries whatever the commits' size.
    @Test func aLargeCommitMergesOneRegionPerEntriesItAppends() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        func position() throws -> (serial: UInt64, next: Int) { try ledger.store.lmdbEngine.withWriteAccess { try $0.recentPosition() } }
        try submit(ledger, .purchase, uid: "uid-recent-small", "8999")
        let start = try position()
        #expect(start.next == 1, "a small commit merges one region")
        let submissions: [Ledger.Submission] = try (0..<1_500).map { index in
            .transaction(
                .purchase, uid: "uid-recent-large-\(index)", try Fixtures.payload(Fixtures.transaction("\(9_000 + index)", at: t)), .trustedDecoded)
        }
        _ = try ledger.submit(submissions, at: t)
        let end = try position()
        let appended = Int(end.serial - start.serial)
        #expect(appended > Recent.entriesPerMerge, "\(appended) entries: more than one merge's")
        #expect(end.next == start.next + (appended + Recent.entriesPerMerge - 1) / Recent.entriesPerMerge)
        #expect(try (0..<1_500).allSatisfy { try ledger.binding(originalTransactionId: "\(9_000 + $0)").uid == "uid-recent-large-\($0)" })
        #expect(try ledger.store.replay().isIntact)
    }

    /// An erased identity stays readable nowhere: its vault entry leaves its region at once, not
    /// when the region is next merged.
    @Test func anErasedIdentityLeavesItsRegionAtOnce() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        try submit(ledger, .purchase, uid: "uid-recent-gone", "5100")
        let vaultKey = try ledger.store.keys.vaultKey(uid: "uid-recent-gone")
        #expect(try regionEntries(ledger.store).contains { $0.1 == .vaultPut && $0.2 == vaultKey })
        _ = try ledger.submit(.deleteAccount(uid: "uid-recent-gone"), at: t + Fixtures.day)
        #expect(try !regionEntries(ledger.store).contains { $0.2 == vaultKey })
        #expect(try ledger.store.read { try ledger.store.pseudonym(ofUID: "uid-recent-gone", in: $0) } == nil)
        #expect(try ledger.binding(originalTransactionId: "5100").state == "tombstoned")
        #expect(try ledger.store.replay().isIntact)
    }

    /// A format-2 store (no regions) is read and written as before, every change straight into the
    /// main trees, until `compact` makes it format 3.
    @Test func aFormatTwoStoreWorksAndCompactMakesItFormatThree() throws {
        defer { directory.remove() }
        do {
            let ledger = try newLedger()
            try submit(ledger, .purchase, uid: "uid-recent-old", "5200")
            // Back to format 2's layout: the regions merged and dropped, the format recorded as 2.
            try ledger.store.lmdbEngine.withWriteAccess { access in
                try access.mergeAllRecent()
                for dbi in try #require(access.recent).databases { try lmdb(mdb_drop(access.txn.handle, dbi, 1), "mdb_drop") }
                try access.putMeta(Array(MetaKey.formatVersion.rawValue.utf8), u32Bytes(2))
            }
        }
        do {
            let ledger = try Ledger(opening: storeURL, clock: Fixtures.clock)
            #expect(ledger.store.formatVersion == 2)
            try submit(ledger, .purchase, uid: "uid-recent-new", "5201")
            try submit(ledger, .restore, uid: "uid-recent-old", "5200", at: t + Fixtures.day)
            #expect(try ledger.binding(originalTransactionId: "5201").uid == "uid-recent-new")
            #expect(try ledger.store.replay().isIntact)
        }
        let compacted = try LedgerBinary.run(["compact", "--store", storeURL.path])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        #expect(compacted.json["formatVersion"] as? Int == 3)
        let ledger = try Ledger(opening: storeURL, clock: Fixtures.clock)
        #expect(ledger.store.formatVersion == 3)
        #expect(try ledger.binding(originalTransactionId: "5200").uid == "uid-recent-old")
        try submit(ledger, .purchase, uid: "uid-recent-third", "5202")
        #expect(try ledger.binding(originalTransactionId: "5202").uid == "uid-recent-third")
        #expect(try ledger.store.replay().isIntact)
    }

    /// A writer reads a region's view the first time a write transaction needs it, not every region
    /// when it opens: a change appended to a region not read yet is noted once, after the entries the
    /// region held, and the other regions stay unread.
    @Test func aRegionIsReadWhenAWriteFirstNeedsIt() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        try submit(ledger, .purchase, uid: "uid-lazy-a", "5400")
        try submit(ledger, .purchase, uid: "uid-lazy-b", "5401")
        let lineage = try ledger.store.keys.lineage(environment: "Sandbox", originalTransactionId: "5400")
        let region = Recent.region(of: lineage.key)
        try ledger.store.lmdbEngine.withWriteAccess { engineAccess in
            let cache = RecentCache()
            let regions = RecentRegions(databases: try #require(engineAccess.recent).databases, cache: cache)
            let access = LMDBAccess(txn: engineAccess.txn, db: engineAccess.db, recent: regions)
            try access.reload(cache, in: regions)
            #expect(!cache.loaded.contains(true))
            let recorded = try access.sequences(ofLineage: lineage, through: .max)
            #expect(recorded.count == 1)
            #expect(cache.loaded.indices.filter { cache.loaded[$0] } == [region])
            // Emptied again: the append below is the first to need the lineage's region.
            try access.reload(cache, in: regions)
            let merged = try access.recentPosition().next
            try access.appendRecent(
                [RecentChange(kind: .lineageEntry, key: lineage.key, fixed: LineageEntryValue(sequence: 1_000, command: 7).buffer)], in: regions)
            #expect(try access.sequences(ofLineage: lineage, through: .max) == recorded + [1_000])
            #expect(Set(cache.loaded.indices.filter { cache.loaded[$0] }) == [region, merged])
        }
    }

    /// A merge takes a region's changes from the writer's view of it: every `lineages` entry, and only
    /// the newest read model of a lineage that changed twice before its region was merged.
    @Test func aMergeKeepsEveryEntryAndTheNewestReadModel() throws {
        defer { directory.remove() }
        let ledger = try newLedger()
        try submit(ledger, .purchase, uid: "uid-merge-other", "7000")
        // A lineage whose region the next two commits do not merge, so both its changes wait there.
        let next = try ledger.store.lmdbEngine.withWriteAccess { try $0.recentPosition().next }
        let id = try #require(
            (7100..<7200).map(String.init).first { id in
                try ![next, next + 1].contains(Recent.region(of: ledger.store.keys.lineage(environment: "Sandbox", originalTransactionId: id).key))
            })
        let lineage = try ledger.store.keys.lineage(environment: "Sandbox", originalTransactionId: id)
        let renewedAt = t + 30 * Fixtures.day
        let purchase = Ledger.Submission.transaction(
            .purchase, uid: "uid-merge", try Fixtures.payload(Fixtures.transaction(id, at: t)), .trustedDecoded)
        let renewal = Ledger.Submission.transaction(
            .renewal, uid: "uid-merge", try Fixtures.payload(Fixtures.transaction(id, transactionId: "\(id)2", at: renewedAt)), .trustedDecoded)
        _ = try ledger.submit(purchase, at: t)
        _ = try ledger.submit(renewal, at: renewedAt)
        let held = try regionEntries(ledger.store).filter { $0.2 == lineage.key }
        #expect(held.filter { $0.1 == .readModel }.count == 2 && held.filter { $0.1 == .lineageEntry }.count == 2, "\(held)")
        func state() throws -> LineageState? { try ledger.store.read { try $0.lineageStates([lineage])[lineage] } }
        let before = try state()
        #expect(before?.entitlement?.expiresAt == renewedAt + 30 * Fixtures.day)

        try ledger.store.lmdbEngine.withWriteAccess { access in try access.putReadModels([]) }
        #expect(try regionEntries(ledger.store).isEmpty)
        #expect(try state() == before)
        #expect(try ledger.store.read { try $0.sequences(ofLineage: lineage, through: .max) }.count == 2)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aDamagedRegionEntryIsReportedNamingItsDatabase() throws {
        defer { directory.remove() }
        do {
            let ledger = try newLedger()
            try submit(ledger, .purchase, uid: "uid-recent-x", "5300")
            try ledger.store.lmdbEngine.withWriteAccess { access in
                let dbi = try #require(access.recent).databases[5]
                try KeyBuffer(UInt64.max).with { k in try [UInt8](repeating: 9, count: 3).withUnsafeBytes { _ = try access.txn.put(dbi, k, $0) } }
            }
        }
        let verify = try LedgerBinary.run(["verify", "--store", storeURL.path])
        #expect(verify.status == 3, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stderr.contains("recent-5"), "\(verify.stderr)")
    }
}
