import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// `verify` and `rebuild` check the LMDB indexes forensics, retries and plan staleness trust, and
/// `rebuild` repairs them from the log.
@Suite struct IndexVerificationTests {
    let t = Fixtures.start
    let day = Fixtures.day
    typealias DB = LedgerStore.Database

    /// Purchases by alice, bob and carol (lineages "1", "2", "3"), then carol's account deletion.
    func populatedLedger(purchases: Int = 3) throws -> (Ledger, TemporaryDirectory) {
        let (ledger, directory) = try Fixtures.ledger()
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let users = ["alice", "bob", "carol"]
        for i in 0..<purchases {
            let uid = i < users.count ? users[i] : "user\(i)"
            let answer = submit.respond(
                to: Fixtures.line(["type": "purchase", "account": uid, "transaction": Fixtures.transaction("\(i + 1)", at: t), "at": t]))
            #expect(Fixtures.object(answer)["decision"] as? String == "granted", "\(answer)")
        }
        let deleted = submit.respond(to: Fixtures.line(["type": "delete-account", "account": "carol", "at": t + day]))
        #expect(Fixtures.object(deleted)["decision"] as? String == "recorded", "\(deleted)")
        return (ledger, directory)
    }

    func firstRecord(in ledger: Ledger, where matches: (LedgerEvent) -> Bool) throws -> Record {
        let record = try ledger.store.records().first { matches($0.event) }
        return try #require(record)
    }

    /// What forensics answers about a lineage: the records it finds, the timeline and the explanation.
    func forensics(_ ledger: Ledger, uid: String, originalTransactionId: String) throws -> [String] {
        let records = try ledger.lineageRecords(originalTransactionId: originalTransactionId).records.map(\.record.sequence)
        let steps = try ledger.replayLineage(originalTransactionId: originalTransactionId).map(\.sequences)
        let explanation = try ledger.explain(uid: uid, originalTransactionId: originalTransactionId, at: t + 2 * day)
        return ["\(records)", "\(steps)", "\(explanation.verdict) \(explanation.cited)"]
    }

    @Test func aHealthyStoreHasNoIndexDifferences() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let report = try ledger.store.replay()
        #expect(report.indexDifferences == [])
        #expect(report.isIntact)
        #expect(try ledger.store.rebuildReadModels(repair: true).indexDifferences == [])
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aMissingLineageEntryIsReportedAndRebuildRestoresIt() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let tombstone = try firstRecord(in: ledger) { if case .lineageTombstoned = $0 { true } else { false } }
        let lineage = try #require(tombstone.event.lineage)
        let before = try forensics(ledger, uid: "carol", originalTransactionId: "3")
        let binding = try ledger.binding(originalTransactionId: "3")
        #expect(before[0].contains("\(tombstone.sequence)"))

        let removed = try ledger.store.environment.write { txn in try txn.delete(DB.lineages, lineage.digest.bytes + u64Bytes(tombstone.sequence)) }
        #expect(removed)
        // Forensics no longer silently omits the record: it refuses the damaged index.
        #expect(throws: LedgerStoreError.self) { try forensics(ledger, uid: "carol", originalTransactionId: "3") }
        let damaged = try ledger.store.replay()
        #expect(damaged.chainFault == nil && damaged.violations.isEmpty && damaged.readModelDifferences.isEmpty)
        #expect(damaged.indexDifferences == ["lineage-index: missing entry for record \(tombstone.sequence) (lineage \(lineage.digest.hex))"])
        #expect(!damaged.isIntact)

        #expect(try ledger.store.rebuildReadModels(repair: false).indexDifferences.count == 1)
        #expect(try ledger.store.replay().indexDifferences.count == 1, "a check changes nothing")
        let repaired = try ledger.store.rebuildReadModels(repair: true)
        #expect(repaired.indexDifferences.count == 1, "the report names what was repaired")
        #expect(try ledger.store.replay().isIntact)
        #expect(try forensics(ledger, uid: "carol", originalTransactionId: "3") == before)
        #expect(try ledger.binding(originalTransactionId: "3") == binding)
    }

    @Test func aBogusAccountEntryIsReportedAndRemoved() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let alice = try #require(try ledger.store.read { try $0.pseudonym(ofUID: "alice") })
        let bobsPurchase = try firstRecord(in: ledger) {
            if case .transactionSubmitted(let e) = $0 { e.account != alice } else { false }
        }
        let aliceBefore = try ledger.store.read { try $0.sequences(ofAccount: alice) }
        let before = try ledger.account(uid: "alice")
        try ledger.store.environment.write { txn in try txn.put(DB.accounts, alice.bytes + u64Bytes(bobsPurchase.sequence), []) }
        #expect(try ledger.store.read { try $0.sequences(ofAccount: alice) } != aliceBefore)

        let damaged = try ledger.store.replay()
        #expect(damaged.indexDifferences == ["account-index: unexpected entry for record \(bobsPurchase.sequence) (account \(alice.bytes.hex))"])
        #expect(!damaged.isIntact)
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.store.read { try $0.sequences(ofAccount: alice) } == aliceBefore)
        #expect(try ledger.account(uid: "alice") == before)
    }

    @Test func anEventIdPointingAtTheWrongRecordIsReportedAndRepaired() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let records = try ledger.store.records()
        let record = records[5]
        try ledger.store.environment.write { txn in try txn.put(DB.eventIds, record.eventId.bytes, u64Bytes(record.sequence + 1)) }
        #expect(try ledger.store.read { try $0.sequence(ofEvent: record.eventId) } == record.sequence + 1)

        let damaged = try ledger.store.replay()
        #expect(damaged.indexDifferences == ["event-ids: entry for record \(record.sequence) points to \(record.sequence + 1)"])
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.store.read { try $0.sequence(ofEvent: record.eventId) } == record.sequence)
    }

    @Test func missingAndUnexpectedEventIdsAreReported() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let record = try ledger.store.records()[2]
        let stranger = [UInt8](repeating: 0xAB, count: 32)
        try ledger.store.environment.write { txn in
            try txn.delete(DB.eventIds, record.eventId.bytes)
            try txn.put(DB.eventIds, stranger, u64Bytes(1))
        }
        let damaged = try ledger.store.replay()
        #expect(
            damaged.indexDifferences == [
                "event-ids: unexpected entry \(stranger.hex) pointing to record 1", "event-ids: missing entry for record \(record.sequence)",
            ])
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func submissionsNamingNoRecordOrTheWrongOneAreReportedButNeverChanged() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let head = try ledger.store.head().sequence
        let ghost = Digest32([UInt8](repeating: 0xCD, count: 32)) ?? .zero
        // A real first attempt (alice's purchase starts at record 1) moved to bob's purchase.
        let alicesSubmission = try ledger.store.records()[0].eventId
        try ledger.store.write { session in
            try session.recordAttempt(of: ghost, attempt: 2, firstSequence: head + 50)
            try session.recordAttempt(of: alicesSubmission, attempt: 0, firstSequence: 5)
        }
        let expected = [
            "submissions: entry \(alicesSubmission.hex) (first attempt) points to record 5, whose event id is not the submission key",
            "submissions: entry \(ghost.hex) points to record \(head + 50), which does not exist",
        ].sorted()
        #expect(try ledger.store.replay().indexDifferences.sorted() == expected)
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().indexDifferences.sorted() == expected, "submissions cannot be rebuilt from the log")
        #expect(try ledger.store.read { try $0.latestAttempt(of: ghost)?.firstSequence } == head + 50)
    }

    @Test func aLongListIsCappedWithACount() throws {
        let (ledger, directory) = try populatedLedger(purchases: 30)
        defer { directory.remove() }
        let records = try ledger.store.records()
        #expect(records.count > 110)
        try ledger.store.environment.write { txn in
            for record in records { try txn.delete(DB.eventIds, record.eventId.bytes) }
        }
        let damaged = try ledger.store.replay()
        #expect(damaged.indexDifferences.count == 101)
        #expect(damaged.indexDifferences.first == "event-ids: missing entry for record 1")
        #expect(damaged.indexDifferences.last == "… and \(records.count - 100) more")
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.store.read { try $0.sequence(ofEvent: records[records.count - 1].eventId) } == UInt64(records.count))
    }

    /// Entries of records past a broken link are not judged: the chain fault is the report.
    @Test func entriesBeyondABrokenChainAreNotJudged() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let head = try ledger.store.head().sequence
        _ = try ledger.store.environment.write { txn in try txn.delete(DB.log, u64Bytes(head - 1)) }
        let report = try ledger.store.replay()
        #expect(report.chainFault?.sequence == head - 1)
        #expect(report.indexDifferences == [])
    }

    @Test func verifyThroughTheBinaryFailsOnADamagedIndexAndRebuildRepairsIt() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let store = ledger.store.directory.path
        let granted = try firstRecord(in: ledger) { if case .entitlementGranted = $0 { true } else { false } }
        let lineage = try #require(granted.event.lineage)
        _ = try ledger.store.environment.write { txn in try txn.delete(DB.lineages, lineage.digest.bytes + u64Bytes(granted.sequence)) }
        let line = "lineage-index: missing entry for record \(granted.sequence) (lineage \(lineage.digest.hex))"

        let verify = try LedgerBinary.run(["verify", "--store", store])
        #expect(verify.status == 1, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.json["intact"] as? Bool == false)
        #expect(verify.json["indexDifferences"] as? [String] == [line])
        #expect(verify.json["firstBadSeq"] == nil)

        let check = try LedgerBinary.run(["rebuild", "--check", "--store", store])
        #expect(check.status == 0, "\(check.stderr)")
        #expect(check.json["indexDifferences"] as? [String] == [line])
        #expect(check.json["repaired"] as? Bool == false)
        #expect(try LedgerBinary.run(["verify", "--store", store]).status == 1, "--check changes nothing")

        let rebuild = try LedgerBinary.run(["rebuild", "--store", store])
        #expect(rebuild.status == 0, "\(rebuild.stderr)")
        #expect(rebuild.json["indexDifferences"] as? [String] == [line])
        #expect(rebuild.json["repaired"] as? Bool == true)
        let again = try LedgerBinary.run(["verify", "--store", store])
        #expect(again.status == 0, "\(again.stdout)")
        #expect(again.json["indexDifferences"] as? [String] == [])
    }
}

@Suite struct ForensicsIndexGuardTests {
    /// With a lineage-index entry missing, replay, explain and dispute export refuse instead of
    /// telling (or signing) a history without it.
    @Test func forensicsRefuseADamagedLineageIndex() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let t = Fixtures.start
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("77", at: t), "at": t]))
        _ = submit.respond(to: Fixtures.line(["type": "delete-account", "account": "ann", "at": t + 1]))
        let lineage = try ledger.lineage(originalTransactionId: "77")
        #expect(try ledger.replayLineage(originalTransactionId: "77").isEmpty == false)
        let tombstone = try #require(
            try ledger.store.records().first { if case .lineageTombstoned = $0.event { return true } else { return false } })
        try ledger.store.environment.write { txn in
            _ = try txn.delete(LedgerStore.Database.lineages, lineage.digest.bytes + u64Bytes(tombstone.sequence))
        }
        #expect(throws: LedgerStoreError.self) { try ledger.replayLineage(originalTransactionId: "77") }
        let store = directory.path("store").path
        let export = try LedgerBinary.run([
            "dispute", "export", "--store", store, "--original-transaction-id", "77", "--out", directory.path("b.json").path,
        ])
        #expect(export.status == 3, "\(export.stdout)")
        #expect(export.stderr.contains("lineage index disagrees"))
        #expect(!FileManager.default.fileExists(atPath: directory.path("b.json").path))
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.replayLineage(originalTransactionId: "77").isEmpty == false)
    }
}
