import AppStoreServerAPI
import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `Ledger.reconcileTransactionHistory` against the fake App Store server: a lineage's history is decided
/// as reconciliation, which never binds and never grants a tombstone; the id is never stored.
@Suite struct HistoryTests {
    static let otid = "2000000000000002"

    @Test func historyOfATombstonedLineageGrantsNobody() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let bought = f.now - 40 * f.day
        try f.purchase("alice", otid: Self.otid, at: bought)
        _ = try f.ledger.submit(.deleteAccount(uid: "alice"), at: bought + f.day)
        #expect(try f.ledger.binding(originalTransactionId: Self.otid).state == "tombstoned")
        let afterDeletion = f.recordCount
        f.server.setHistory(
            Self.otid,
            [
                try f.transaction(Self.otid, at: bought), try f.transaction(Self.otid, id: "2000000000000102", at: bought + 30 * f.day),
                try f.transaction(Self.otid, id: "2000000000000103", at: f.now - f.day),
            ])
        var pages: [Int] = []
        let items = try f.ledger.reconcileTransactionHistory(
            originalTransactionId: Self.otid, from: try f.client(), page: { pages.append($0.count) })
        #expect(pages == [2, 1])
        #expect(items.map { try? $0.result.get().code } == ["tombstoned", "tombstoned", "tombstoned"])
        #expect(items.map { try? $0.result.get().outcome } == [.ignored, .ignored, .ignored])
        #expect(items.map { $0.transaction?.transactionId } == [Self.otid, "2000000000000102", "2000000000000103"])
        #expect(try f.ledger.binding(originalTransactionId: Self.otid).state == "tombstoned")
        #expect(try f.ledger.account(uid: "alice").known == false)
        let appended = try f.ledger.store.records(from: afterDeletion + 1)
        #expect(appended.map { $0.events.map(\.name) } == Array(repeating: ["transaction-submitted", "decision-issued"], count: 3))
        // The requests: subscriptions only, oldest first, the revision of the previous page, the id in the path.
        let requests = f.server.requests
        #expect(requests.map(\.path) == Array(repeating: "/inApps/v2/history/\(Self.otid)", count: 2))
        #expect(requests.map { $0.query["revision"] } == [nil, "revision-2"])
        #expect(requests.allSatisfy { $0.query["productType"] == "AUTO_RENEWABLE" && $0.query["sort"] == "ASCENDING" && $0.tokenProblem == nil })

        let records = f.recordCount
        let again = try f.ledger.reconcileTransactionHistory(originalTransactionId: Self.otid, from: try f.client())
        #expect(again.allSatisfy { (try? $0.result.get().duplicate) == true })
        #expect(f.recordCount == records, "a second run appends nothing")
    }

    @Test func historyRefreshesTheBoundAccountAndNeverBindsAnUnownedLineage() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let bought = f.now - 40 * f.day
        try f.purchase("alice", otid: Self.otid, at: bought)
        #expect(try f.ledger.account(uid: "alice").entitlements.first?.active == false, "the first month is over")
        f.server.setHistory(
            Self.otid, [try f.transaction(Self.otid, at: bought), try f.transaction(Self.otid, id: "2000000000000104", at: f.now - f.day)])
        f.server.setHistory("2000000000000003", [try f.transaction("2000000000000003", at: f.now - f.day)])
        let items = try f.ledger.reconcileTransactionHistory(originalTransactionId: Self.otid, from: try f.client())
        #expect(items.last.map { try? $0.result.get().outcome } == .granted)
        #expect(try f.ledger.account(uid: "alice").entitlements.first?.active == true, "the renewal found in the history refreshed alice")
        let stranger = try f.ledger.reconcileTransactionHistory(originalTransactionId: "2000000000000003", from: try f.client())
        #expect(stranger.map { try? $0.result.get().code } == ["not-bound"])
        #expect(try f.ledger.binding(originalTransactionId: "2000000000000003").state == "unbound")
    }

    @Test func anUnknownTransactionIdIs404AndAppendsNothing() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        #expect {
            try f.ledger.reconcileTransactionHistory(originalTransactionId: "2000000000009999", from: try f.client())
        } throws: { error in
            guard let error = error as? AppStoreAPIError else { return false }
            return error.kind == .notFound && error.status == 404 && error.errorCode == 4_040_010
                && error.description.contains("unknown transaction id") && error.description.contains("Transaction id not found.")
        }
        #expect(f.recordCount == 0)
        #expect(f.sleeps.list.isEmpty, "404 is not retried")
    }

    @Test func noPlaintextAppleIdentifierIsWrittenToTheStore() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let bought = f.now - 5 * f.day
        try f.purchase("uid-history-alice-7f3a9c", otid: Self.otid, at: bought)
        f.server.setHistory(
            Self.otid, [try f.transaction(Self.otid, at: bought), try f.transaction(Self.otid, id: "2000000000000777", at: bought + 1)])
        try f.apple("DID_RENEW", uuid: "5f1c2a44-uuid-never-stored", otid: Self.otid, transactionId: "2000000000000888", at: bought + 2)
        try f.ledger.reconcileTransactionHistory(originalTransactionId: Self.otid, from: try f.client())
        try f.ledger.backfillNotifications(from: try f.client(), since: bought, until: LedgerTime.now() + 1_000)
        #expect(f.recordCount >= 4, "one record per decided command")
        for identifier in [Self.otid, "2000000000000777", "2000000000000888", "5f1c2a44-uuid-never-stored", "uid-history-alice-7f3a9c"] {
            #expect(try !Fixtures.anyFile(in: f.store, contains: identifier), "\(identifier) is in the store")
        }
    }
}
