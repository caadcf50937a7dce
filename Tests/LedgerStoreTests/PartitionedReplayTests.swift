import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@testable import LedgerStore

/// `verify` and `rebuild` split the lineage key space into ranges when a store holds more lineages
/// than one pass may keep: the report and the repairs are the same as in one pass.
@Suite struct PartitionedReplayTests {
    let t = Fixtures.start

    /// 24 lineages bought by 12 accounts (two each), two of them deleted, a refund.
    func ledger() throws -> (Ledger, TemporaryDirectory) {
        let (ledger, directory) = try Fixtures.ledger()
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        for i in 0..<24 {
            let answer = submit.respond(
                to: Fixtures.line([
                    "type": "purchase", "account": "user\(i / 2)", "transaction": Fixtures.transaction("\(100 + i)", at: t), "at": t,
                ]))
            #expect(Fixtures.object(answer)["decision"] as? String == "granted", "\(answer)")
        }
        for uid in ["user3", "user7"] {
            _ = submit.respond(to: Fixtures.line(["type": "delete-account", "account": uid, "at": t + 1]))
        }
        return (ledger, directory)
    }

    /// The report of one pass and of `lineagesPerPass` lineages per pass, compared field by field.
    func expectSameReport(_ ledger: Ledger, lineagesPerPass: Int, lineages: Int = 24, _ comment: Comment? = nil) throws -> ReplayReport {
        let whole = try ledger.store.replay(repair: false, progress: nil, lineagesPerPass: .max)
        let parts = try ledger.store.replay(repair: false, progress: nil, lineagesPerPass: lineagesPerPass)
        #expect(try ledger.store.read { try Analysis.passes($0, lineagesPerPass: lineagesPerPass).count } > 2)
        #expect(parts.verifiedRecords == whole.verifiedRecords && parts.events == whole.events, comment)
        #expect(parts.chainFault == whole.chainFault, comment)
        #expect(parts.violations == whole.violations, comment)
        #expect(parts.readModelDifferences == whole.readModelDifferences, comment)
        #expect(parts.indexDifferences == whole.indexDifferences, comment)
        #expect(parts.lineages == whole.lineages && whole.lineages == lineages, comment)
        return parts
    }

    @Test func anIntactStoreGivesTheSameReportInSeveralPasses() throws {
        let (ledger, directory) = try ledger()
        defer { directory.remove() }
        #expect(try expectSameReport(ledger, lineagesPerPass: 5).isIntact)
    }

    @Test func damagedReadModelsAreFoundAndRepairedRangeByRange() throws {
        let (ledger, directory) = try ledger()
        defer { directory.remove() }
        let models = try ledger.persistedReadModels()
        let lineageKeys = models.keys.filter { $0.first == ReadModel.lineagePrefix }.sorted { $0.lexicographicallyPrecedes($1) }
        let deleted = try #require(models.keys.first { $0.first == ReadModel.deletedPrefix })
        // A removed entry at each end of the key space and one in the middle, a changed one, a bogus one.
        let removed = [lineageKeys[0], lineageKeys[11], lineageKeys[23], deleted]
        let changed = lineageKeys[5]
        try ledger.store.write { _, writer in
            try writer.removeReadModels(removed)
            try writer.putReadModels([
                (changed, ReadModel.encode(LineageState())), ([ReadModel.lineagePrefix] + [UInt8](repeating: 0xEE, count: 16), [0]),
            ])
        }
        let report = try expectSameReport(ledger, lineagesPerPass: 5)
        #expect(report.readModelDifferences.count == 6, "\(report.readModelDifferences)")
        let repaired = try ledger.store.replay(repair: true, progress: nil, lineagesPerPass: 5)
        #expect(repaired.readModelDifferences == report.readModelDifferences)
        #expect(try ledger.store.replay().isIntact)
        #expect(try ledger.persistedReadModels() == models)
    }

    /// Invariant 1 counts an account's lineages in every range: the passes add up to one violation.
    @Test func aViolationSpanningRangesIsReportedOnce() throws {
        let (ledger, directory) = try ledger()
        defer { directory.remove() }
        let passes = try ledger.store.read { try Analysis.passes($0, lineagesPerPass: 3).count }
        func range(_ otid: Int) throws -> Int {
            let high = try ledger.lineage(originalTransactionId: "\(otid)").key.high
            return try #require((0..<passes).first { Analysis.range($0, of: passes).contains(high) })
        }
        // An account whose two lineages fall in different ranges (user3 and user7 were deleted).
        let user = try #require(try [0, 1, 2, 4, 5, 6, 8, 9, 10, 11].first { try range(100 + 2 * $0) != range(101 + 2 * $0) })
        let account = try #require(try ledger.pseudonym(ofUID: "user\(user)"))
        try ledger.appendRaw([.accountDeleted(account: account)], at: t + 2)
        let report = try expectSameReport(ledger, lineagesPerPass: 3)
        #expect(report.violations.map(\.invariant) == [1])
        #expect(report.violations.first?.message == InvariantChecker.deletedWhileBound(account, 2))
    }

    /// Invariant 1 follows each account's lineages as the full checker's sets do, on histories that
    /// already broke it: an account deleted while bound, bound again to a new lineage and deleted
    /// again is reported twice (a tombstone of a lineage it no longer held does not hide the second);
    /// a lineage bound to another account without a transfer still counts for its first owner.
    @Test func anAccountDeletedWhileBoundThenBoundAgainIsReportedAtEachDeletion() throws {
        let (ledger, directory) = try ledger()
        defer { directory.remove() }
        let user0 = try #require(try ledger.pseudonym(ofUID: "user0"))
        let user1 = try #require(try ledger.pseudonym(ofUID: "user1"))
        let user4 = try #require(try ledger.pseudonym(ofUID: "user4"))
        let first = try ledger.lineage(originalTransactionId: "100")
        let fresh = LineageKey(Key128(high: 0x5EED, low: 1))
        try ledger.appendRaw([.accountDeleted(account: user0)], at: t + 2)  // record 27: user0 holds 100, 101
        try ledger.appendRaw([.lineageBound(lineage: fresh, account: user0)], at: t + 3)
        try ledger.appendRaw([.lineageTombstoned(lineage: first, formerAccount: user0)], at: t + 4)
        try ledger.appendRaw([.accountDeleted(account: user0)], at: t + 5)  // record 30: user0 holds the fresh lineage
        try ledger.appendRaw([.lineageBound(lineage: try ledger.lineage(originalTransactionId: "102"), account: user4)], at: t + 6)
        try ledger.appendRaw([.accountDeleted(account: user1)], at: t + 7)  // record 32: user1 holds 102, 103
        let expected = [
            "27 \(InvariantChecker.deletedWhileBound(user0, 2))", "30 \(InvariantChecker.deletedWhileBound(user0, 1))",
            "32 \(InvariantChecker.deletedWhileBound(user1, 2))",
        ]
        let report = try expectSameReport(ledger, lineagesPerPass: 3, lineages: 25)
        #expect(report.violations.filter { $0.invariant == 1 && $0.message.contains("deleted") }.map { "\($0.sequence) \($0.message)" } == expected)

        let verify = try LedgerBinary.run(["verify", "--store", ledger.store.directory.path])
        #expect(verify.status == 1, "\(verify.stderr)")
        let violations = verify.json["invariantViolations"] as? [[String: Any]] ?? []
        let deletions = violations.filter { ($0["message"] as? String)?.contains("deleted while") == true }
        #expect(deletions.map { "\($0["seq"] as? Int ?? 0) \($0["message"] as? String ?? "")" } == expected, "\(verify.stdout)")
    }
}
