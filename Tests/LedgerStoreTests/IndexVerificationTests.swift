import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@testable import LedgerStore

/// `verify` and `rebuild` check the indexes forensics, retries and plan staleness trust, and
/// `rebuild` repairs them from the log.
@Suite struct IndexVerificationTests {
    let t = Fixtures.start
    let day = Fixtures.day

    /// Purchases by alice, bob and carol (lineages "1", "2", "3", records 1–3), then carol's
    /// account deletion (record 4).
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

    func damage(_ ledger: Ledger, removing removed: [IndexEntry] = [], adding added: [IndexEntry] = []) throws {
        try ledger.store.lmdbEngine.withWriteAccess { access in
            try access.remove(removed)
            var batch = EngineBatch()
            batch.entries = added
            try access.apply(batch)
        }
    }

    /// The `lineages` entry of `lineage` for record `sequence` (which carries the record's command).
    func lineageEntry(_ ledger: Ledger, _ lineage: LineageKey, _ sequence: UInt64) throws -> IndexEntry {
        let record = try #require(try ledger.store.records(from: sequence, limit: 1).first)
        return .lineage(lineage, sequence: sequence, command: record.command)
    }

    /// What forensics answers about a lineage: the records it finds, the timeline and the explanation.
    func forensics(_ ledger: Ledger, uid: String, originalTransactionId: String) throws -> [String] {
        let records = try ledger.lineageRecords(originalTransactionId: originalTransactionId).records.map(\.record.sequence)
        let steps = try ledger.replayLineage(originalTransactionId: originalTransactionId).map(\.sequences)
        let explanation = try ledger.explain(uid: uid, originalTransactionId: originalTransactionId, at: t + 2 * day)
        return ["\(records)", "\(steps)", "\(explanation.verdict) \(explanation.cited)"]
    }

    /// The keyed multiset hash behind the index and read-model comparisons: the order of the entries
    /// does not matter; every field, and how bytes split between a key and a value, does.
    @Test func theMultisetHashIgnoresOrderAndSeesEveryField() {
        let command = Key128(high: 1, low: 2)
        let lineage = LineageKey(Key128(high: 3, low: 4))
        let entries: [IndexEntry] = [
            .command(command, sequence: 1), .lineage(lineage, sequence: 1, command: command),
            .accountLineage(AccountID(Key128(high: 5, low: 6)), lineage, sequence: 1),
            .merkleNode(level: 8, index: 0, hash: .zero), .malformed(.lineages, key: [1, 2, 3], value: Array(0..<11)),
        ]
        func hash(_ entries: [IndexEntry]) -> MultisetHash {
            var hash = MultisetHash()
            for entry in entries { hash.add(entry) }
            return hash
        }
        #expect(hash(entries) == hash(entries.reversed()))
        let changed: [IndexEntry] = [
            .command(command, sequence: 2), .lineage(lineage, sequence: 1, command: Key128(high: 1, low: 3)),
            .accountLineage(AccountID(Key128(high: 5, low: 7)), lineage, sequence: 1),
            .merkleNode(level: 9, index: 0, hash: .zero), .malformed(.lineages, key: [1, 2], value: [3] + Array(0..<11)),
        ]
        for (index, entry) in changed.enumerated() {
            var other = entries
            other[index] = entry
            #expect(hash(other) != hash(entries), "\(entry)")
        }
        var split = (MultisetHash(), MultisetHash())
        split.0.add(key: [1, 2], value: [3])
        split.1.add(key: [1], value: [2, 3])
        #expect(split.0 != split.1)
    }

    @Test func aHealthyStoreHasNoIndexDifferences() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let report = try ledger.store.replay()
        #expect(report.indexDifferences == [])
        #expect(report.isIntact)
        #expect(report.verifiedRecords == 4)
        #expect(try ledger.store.rebuildReadModels(repair: true).indexDifferences == [])
        #expect(try ledger.store.replay().isIntact)
    }

    /// The reading thread hashes a batch's implied entries when the folding thread is behind, except
    /// a transfer approval's or refusal's, which name the lineage of its case (known to the folding
    /// thread only): the reports are the same whichever thread hashes, intact and with a damaged index.
    @Test func impliedEntriesHashedByTheReadingThreadGiveTheSameReports() throws {
        let staffed = try StaffedLedger("reader-hashing")
        let ledger = staffed.ledger
        defer { staffed.directory.remove() }
        for (uid, otid) in [("alice", "1001"), ("bob", "1002")] {
            staffed.send(["type": "purchase", "account": uid, "transaction": Fixtures.transaction(otid, at: t), "at": t])
        }
        let request = TransferRequestInput(
            caseId: "C-1", reason: "lost access", originalTransactionId: "1001", targetUID: "bob", targetAuthentication: "re-auth",
            ownershipEvidence: "order id")
        #expect(try ledger.requestTransfer(request, operator: "olivia", key: staffed.olivia, at: t + day).accepted)
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: staffed.adam, at: t + day).accepted)
        let approval = try ledger.store.head().sequence
        #expect(try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: staffed.olivia, at: t + 2 * day).accepted)
        #expect(try !ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: staffed.olivia, at: t + 3 * day).accepted)
        func expectSameReports() throws -> ReplayReport {
            let reader = try ledger.store.replay(repair: false, progress: nil, lineagesPerPass: .max, readerHashing: .always)
            let folder = try ledger.store.replay(repair: false, progress: nil, lineagesPerPass: .max)
            #expect(reader.indexDifferences == folder.indexDifferences && reader.isIntact == folder.isIntact)
            #expect(reader.violations == folder.violations && reader.events == folder.events)
            return reader
        }
        #expect(try expectSameReports().isIntact)
        let lineage = try ledger.lineage(originalTransactionId: "1001")
        try damage(ledger, removing: [try lineageEntry(ledger, lineage, approval)])
        #expect(try expectSameReports().indexDifferences == ["lineages: missing entry for record \(approval) (lineage \(lineage))"])
    }

    /// The folding thread walks stored indexes and read models on a transaction of its own, which
    /// LMDB gives only while it is the reading thread's snapshot: asked from another thread it reads
    /// what the reader reads; once a write has committed since, there is none (the reading thread
    /// then walks everything), and the reader still reads its snapshot.
    @Test func aReaderOfTheSameSnapshotIsGivenUntilAWriteCommits() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        /// What `readingSameSnapshot` gives on another thread: the head it reads, or nil.
        func peerHead(_ reader: any EngineReader) throws -> UInt64? {
            let shared = Analysis.SharedReader(reader: reader)
            nonisolated(unsafe) var result: Result<UInt64?, any Error> = .success(nil)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                result = Result { try shared.readingSameSnapshot { try $0.head().sequence } }
                done.signal()
            }
            done.wait()
            return try result.get()
        }
        try ledger.store.lmdbEngine.read { reader throws in
            #expect(try peerHead(reader) == 4)
            let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
            let answer = submit.respond(
                to: Fixtures.line(["type": "purchase", "account": "dave", "transaction": Fixtures.transaction("9", at: t), "at": t]))
            #expect(Fixtures.object(answer)["decision"] as? String == "granted", "\(answer)")
            #expect(try peerHead(reader) == nil)
            #expect(try reader.head().sequence == 4)
        }
        try ledger.store.lmdbEngine.read { reader throws in #expect(try peerHead(reader) == 5) }
    }

    /// The stored side walked by the folding thread (on its own transaction) or by the reading thread
    /// gives the same reports: intact, with damaged indexes and a changed read model, in one pass and
    /// in several (a later pass walks only its range of read models).
    @Test func storedIndexesWalkedByTheFoldingThreadGiveTheSameReports() throws {
        let (ledger, directory) = try populatedLedger(purchases: 6)
        defer { directory.remove() }
        func expectSameReports() throws -> ReplayReport {
            var reports: [ReplayReport] = []
            for perPass in [Int.max, 2] {
                for walking in [Analysis.StoredWalking.foldingThreadFirst, .whicheverIsFree] {
                    reports.append(try ledger.store.replay(repair: false, progress: nil, lineagesPerPass: perPass, walking: walking))
                }
            }
            for report in reports.dropFirst() {
                #expect(report.indexDifferences == reports[0].indexDifferences)
                #expect(report.readModelDifferences == reports[0].readModelDifferences)
                #expect(report.isIntact == reports[0].isIntact && report.events == reports[0].events)
            }
            return reports[0]
        }
        #expect(try expectSameReports().isIntact)
        let lineage = try ledger.lineage(originalTransactionId: "2")
        let alice = try #require(try ledger.store.read { try ledger.store.pseudonym(ofUID: "alice", in: $0) })
        try damage(ledger, removing: [try lineageEntry(ledger, lineage, 2)], adding: [.accountLineage(alice, lineage, sequence: 2)])
        try ledger.store.lmdbEngine.withWriteAccess { try $0.putReadModels([(ReadModel.lineageKey(lineage), [0])]) }
        let damaged = try expectSameReports()
        #expect(
            damaged.indexDifferences.sorted() == [
                "account-lineages: unexpected entry for record 2 (account \(alice), lineage \(lineage))",
                "lineages: missing entry for record 2 (lineage \(lineage))",
            ])
        #expect(damaged.readModelDifferences == ["lineage \(lineage): persisted and replayed values differ"])
    }

    @Test func aMissingLineageEntryIsReportedAndRebuildRestoresIt() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let lineage = try ledger.lineage(originalTransactionId: "3")
        let before = try forensics(ledger, uid: "carol", originalTransactionId: "3")
        let binding = try ledger.binding(originalTransactionId: "3")
        #expect(before[0] == "[3, 4]")

        try damage(ledger, removing: [try lineageEntry(ledger, lineage, 4)])
        // Forensics no longer silently omits the record: it refuses the damaged index.
        #expect(throws: LedgerStoreError.self) { try forensics(ledger, uid: "carol", originalTransactionId: "3") }
        let damaged = try ledger.store.replay()
        #expect(damaged.chainFault == nil && damaged.violations.isEmpty && damaged.readModelDifferences.isEmpty)
        #expect(damaged.indexDifferences == ["lineages: missing entry for record 4 (lineage \(lineage))"])
        #expect(!damaged.isIntact)

        #expect(try ledger.store.rebuildReadModels(repair: false).indexDifferences.count == 1)
        #expect(try ledger.store.replay().indexDifferences.count == 1, "a check changes nothing")
        let repaired = try ledger.store.rebuildReadModels(repair: true)
        #expect(repaired.indexDifferences.count == 1, "the report names what was repaired")
        #expect(try ledger.store.replay().isIntact)
        #expect(try forensics(ledger, uid: "carol", originalTransactionId: "3") == before)
        #expect(try ledger.binding(originalTransactionId: "3") == binding)
    }

    @Test func aBogusAccountLineageIsReportedAndRemoved() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let alice = try #require(try ledger.store.read { try ledger.store.pseudonym(ofUID: "alice", in: $0) })
        let bobs = try ledger.lineage(originalTransactionId: "2")
        let before = try ledger.account(uid: "alice")
        try damage(ledger, adding: [.accountLineage(alice, bobs, sequence: 2)])

        let damaged = try ledger.store.replay()
        #expect(damaged.indexDifferences == ["account-lineages: unexpected entry for record 2 (account \(alice), lineage \(bobs))"])
        #expect(!damaged.isIntact)
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.account(uid: "alice") == before)
    }

    /// A command entry moved to another record (a deletion's, in `commands`), and a lineage entry
    /// carrying another command (a purchase's, whose command is indexed with its lineage): the retries
    /// of those commands would not be recognised.
    @Test func aCommandEntryPointingAtTheWrongRecordIsReportedAndRepaired() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let records = try ledger.store.records()
        let (purchase, deletion) = (records[0], records[3])
        #expect(purchase.homeLineage != nil && deletion.homeLineage == nil)
        let lineage = try #require(purchase.homeLineage)
        let wrong = Key128(high: purchase.command.high ^ 1, low: 0)
        try damage(
            ledger,
            removing: [.command(deletion.command, sequence: 4), .lineage(lineage, sequence: 1, command: purchase.command)],
            adding: [.command(deletion.command, sequence: 3), .lineage(lineage, sequence: 1, command: wrong)])
        let damaged = try ledger.store.replay()
        let prefix = String(deletion.command.hex.prefix(16))
        #expect(
            damaged.indexDifferences == [
                "commands: unexpected entry for record 3 (command \(prefix))", "commands: missing entry for record 4 (command \(prefix))",
                "lineages: unexpected entry for record 1 (lineage \(lineage))", "lineages: missing entry for record 1 (lineage \(lineage))",
            ])
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        // The retries are recognised again: they append nothing.
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let retry = submit.respond(
            to: Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1", at: t), "at": t]))
        #expect(Fixtures.object(retry)["duplicate"] as? Bool == true, "\(retry)")
        let deleteAgain = submit.respond(to: Fixtures.line(["type": "delete-account", "account": "carol", "at": t + day]))
        #expect(Fixtures.object(deleteAgain)["duplicate"] as? Bool == true, "\(deleteAgain)")
        #expect(try ledger.store.head().sequence == 4)
    }

    /// A changed Merkle node is index damage when the records still match the head's chain.
    @Test func aDamagedMerkleNodeIsReportedAndRebuilt() throws {
        let (ledger, directory) = try populatedLedger(purchases: 300)
        defer { directory.remove() }
        let node = try #require(try ledger.store.read { try $0.merkleNode(level: 8, index: 0) })
        let bogus = Digest32([UInt8](repeating: 0x42, count: 32)) ?? .zero
        try damage(ledger, removing: [.merkleNode(level: 8, index: 0, hash: node)], adding: [.merkleNode(level: 8, index: 0, hash: bogus)])
        let damaged = try ledger.store.replay()
        #expect(damaged.chainFault == nil, "the records themselves are intact")
        #expect(damaged.indexDifferences == ["merkle: unexpected node of records 1 to 256", "merkle: missing node of records 1 to 256"])
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.store.read { try $0.merkleNode(level: 8, index: 0) } == node)
    }

    @Test func aLongListIsCappedWithACount() throws {
        let (ledger, directory) = try populatedLedger(purchases: 120)
        defer { directory.remove() }
        let records = try ledger.store.records().filter { $0.homeLineage != nil }  // not the deletion
        #expect(records.count > 110)
        try damage(ledger, removing: try records.map { try lineageEntry(ledger, #require($0.homeLineage), $0.sequence) })
        let damaged = try ledger.store.replay()
        #expect(damaged.indexDifferences.count == 101)
        #expect(damaged.indexDifferences.first?.hasPrefix("lineages: missing entry for record 1 ") == true)
        #expect(damaged.indexDifferences.last == "… and \(records.count - 100) more")
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aMalformedEntryIsReportedAndRemoved() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        try ledger.store.lmdbEngine.withWriteAccess { access in
            _ = try [UInt8]([1, 2, 3]).withUnsafeBytes { key in try [UInt8]([4]).withUnsafeBytes { try access.txn.put(access.db.lineages, key, $0) } }
        }
        let damaged = try ledger.store.replay()
        #expect(damaged.indexDifferences == ["lineages: unexpected malformed entry (3-byte key 010203, 1-byte value)"])
        _ = try ledger.store.rebuildReadModels(repair: true)
        #expect(try ledger.store.replay().isIntact)
    }

    /// Entries of records past a broken chain are not judged: the chain fault is the report.
    @Test func entriesBeyondABrokenChainAreNotJudged() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        try ledger.store.lmdbEngine.withWriteAccess { access in _ = try KeyBuffer(UInt64(3)).with { try access.txn.delete(access.db.log, $0) } }
        let report = try ledger.store.replay()
        #expect(report.chainFault?.sequence == 3)
        #expect(report.verifiedRecords == 2)
        #expect(report.indexDifferences == [])
    }

    @Test func verifyThroughTheBinaryFailsOnADamagedIndexAndRebuildRepairsIt() throws {
        let (ledger, directory) = try populatedLedger()
        defer { directory.remove() }
        let store = ledger.store.directory.path
        let lineage = try ledger.lineage(originalTransactionId: "2")
        try damage(ledger, removing: [try lineageEntry(ledger, lineage, 2)])
        let line = "lineages: missing entry for record 2 (lineage \(lineage))"

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
    /// With a lineage entry missing, replay, explain and dispute export refuse instead of telling
    /// (or signing) a history without it.
    @Test func forensicsRefuseADamagedLineageIndex() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let t = Fixtures.start
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("77", at: t), "at": t]))
        _ = submit.respond(to: Fixtures.line(["type": "delete-account", "account": "ann", "at": t + 1]))
        let lineage = try ledger.lineage(originalTransactionId: "77")
        #expect(try ledger.replayLineage(originalTransactionId: "77").isEmpty == false)
        let record = try #require(try ledger.store.records(from: 2, limit: 1).first)
        try ledger.store.lmdbEngine.withWriteAccess { try $0.remove([.lineage(lineage, sequence: 2, command: record.command)]) }
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
