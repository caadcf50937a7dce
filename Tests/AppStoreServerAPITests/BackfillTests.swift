import AppStoreServerAPI
import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `Ledger.backfillNotifications` against the fake App Store server: the gap a down ledger leaves is
/// filled, duplicates change nothing, Apple's pacing is honoured, and a failed run loses nothing.
@Suite struct BackfillTests {
    static let otid = "2000000000000001"

    /// alice owns lineage `otid`, bought 10 days ago; Apple's history holds its SUBSCRIBED notification
    /// (which the ledger received), a REFUND two days ago (which it never received) and a notification
    /// about a lineage nobody owns.
    func ledgerThatMissedARefund(_ f: AppleAPIFixture) throws {
        let bought = f.now - 10 * f.day
        try f.purchase("alice", otid: Self.otid, at: bought)
        let subscribed = try f.notification("SUBSCRIBED", uuid: "uuid-subscribed", otid: Self.otid, transactionId: Self.otid, at: bought)
        _ = try f.ledger.submit(try f.ledger.notificationSubmission(signedPayload: subscribed, at: bought), at: bought)
        f.server.add(notification: subscribed, signedDate: bought)
        try f.apple(
            "REFUND", uuid: "uuid-refund", otid: Self.otid, transactionId: Self.otid, at: f.now - 2 * f.day, revokedAt: f.now - 2 * f.day)
        try f.apple("SUBSCRIBED", uuid: "uuid-stranger", otid: "2000000000000009", transactionId: "2000000000000009", at: f.now - f.day)
    }

    @Test func aRefundTheLedgerNeverReceivedRevokesTheEntitlementAndASecondRunAppendsNothing() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        try ledgerThatMissedARefund(f)
        #expect(try f.ledger.account(uid: "alice").entitlements.first?.active == true)
        let since = f.now - 20 * f.day
        let until = LedgerTime.now() + 1_000
        let client = try f.client()
        var reported: [Int] = []
        let summary = try f.ledger.backfillNotifications(from: client, since: since, until: until, progress: { reported.append($0.fetched) })
        #expect(summary.pages == 2)
        #expect(reported == [2, 3], "progress after each page")
        #expect(counts(summary) == [3, 2, 1, 0])
        #expect(summary.byType["REFUND"] == .init(new: 1, duplicate: 0, invalid: 0))
        #expect(summary.byType["SUBSCRIBED"] == .init(new: 1, duplicate: 1, invalid: 0))
        #expect(summary.newByOutcome == ["recorded": 1, "ignored": 1])
        let alice = try #require(try f.ledger.account(uid: "alice").entitlements.first)
        #expect(alice.revoked && !alice.active, "the missed refund revoked alice's entitlement")
        #expect(try f.ledger.binding(originalTransactionId: "2000000000000009").state == "unbound", "a notification never binds")

        // What was sent: the window in ms, the pagination token, one token reused for both pages.
        let requests = f.server.requests
        #expect(requests.count == 2)
        #expect(requests.allSatisfy { $0.tokenProblem == nil && $0.method == "POST" && $0.path == "/inApps/v1/notifications/history" })
        #expect(requests.map { ($0.body["startDate"] as? NSNumber)?.int64Value } == [since, since])
        #expect(requests.map { ($0.body["endDate"] as? NSNumber)?.int64Value } == [until, until])
        #expect(requests.map { $0.query["paginationToken"] } == [nil, "page-2"])
        #expect(Set(requests.map(\.token)).count == 1, "the token is reused until shortly before it expires")

        let records = f.recordCount
        let again = try f.ledger.backfillNotifications(from: client, since: since, until: until)
        #expect(counts(again) == [3, 0, 3, 0])
        #expect(f.recordCount == records, "a second backfill appends nothing")
    }

    @Test func rateLimitsAndOutagesAreRetriedAsAppleAsks() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        try ledgerThatMissedARefund(f)
        f.server.fault(
            request: 1, .status(429, headers: [("Retry-After", "7")], body: #"{"errorCode":4290000,"errorMessage":"Rate limit exceeded."}"#))
        f.server.fault(request: 2, .status(503))
        f.server.fault(request: 4, .status(500, body: #"{"errorCode":5000001,"errorMessage":"An unknown error occurred. Please try again."}"#))
        let summary = try f.ledger.backfillNotifications(from: try f.client(), since: f.now - 20 * f.day, until: LedgerTime.now() + 1_000)
        #expect(counts(summary).prefix(3) == [3, 2, 1])
        // 429 waits what Retry-After says; 503 and 500 back off 0.5 s × 2^(attempt−1) (attempts counted per request).
        #expect(f.sleeps.list == [7, 1, 0.5])
        #expect(f.server.requests.count == 5)
    }

    @Test func aRetryAfterLongerThanTheClientWaitsEndsTheRun() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        f.server.fault(request: 1, .status(429, headers: [("Retry-After", "3600")]))
        #expect {
            try f.ledger.backfillNotifications(from: try f.client(), since: f.now - f.day, until: f.now)
        } throws: { error in
            let error = error as? AppStoreAPIError
            return error?.kind == .rateLimited && error?.status == 429 && error?.description.contains("3600 s") == true
        }
        #expect(f.sleeps.list.isEmpty)
    }

    @Test func anInterruptedBackfillKeepsWhatItDecidedAndARerunContinues() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        try f.purchase("alice", otid: Self.otid, at: f.now - 10 * f.day)
        for index in 0..<6 {
            try f.apple(
                "DID_CHANGE_RENEWAL_STATUS", uuid: "uuid-\(index)", otid: Self.otid, transactionId: Self.otid, at: f.now - 9 * f.day + Int64(index))
        }
        // Page 1 and 2 are answered; page 3 meets 503 on every attempt.
        for request in 3...6 { f.server.fault(request: request, .status(503)) }
        let records = f.recordCount
        let since = f.now - 20 * f.day
        let until = LedgerTime.now() + 1_000
        #expect {
            try f.ledger.backfillNotifications(from: try f.client(), since: since, until: until)
        } throws: { error in
            guard let error = error as? AppStoreAPIError else { return false }
            return error.kind == .unavailable && error.status == 503 && error.endpoint == "POST /inApps/v1/notifications/history"
                && error.description.contains("POST /inApps/v1/notifications/history answered 503")
                && error.description.contains("gave up after 4 attempts")
        }
        #expect(f.sleeps.list == [0.5, 1, 2])
        #expect(f.recordCount == records + 4, "pages 1 and 2 were decided (one record per notification) before page 3 was asked for")

        f.server.clearFaults()
        let rerun = try f.ledger.backfillNotifications(from: try f.client(), since: since, until: until)
        #expect(counts(rerun).prefix(3) == [6, 2, 4])
        #expect(f.recordCount == records + 6)
    }

    @Test func aWrongKeyIsRefused401WithAClearErrorAndNothingIsAppended() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        try ledgerThatMissedARefund(f)
        let records = f.recordCount
        let otherKey = try ES256PrivateKeyFromFile("testLeaf.key.pem")
        for client in [try f.client(key: otherKey), try f.client(keyId: "WRONGKEY99")] {
            #expect {
                try f.ledger.backfillNotifications(from: client, since: f.now - 20 * f.day, until: f.now)
            } throws: { error in
                guard let error = error as? AppStoreAPIError else { return false }
                return error.kind == .authentication && error.status == 401 && error.description.contains("key id")
                    && error.description.contains("issuer id") && error.description.contains("private key")
            }
        }
        #expect(
            f.server.requests.map { $0.tokenProblem.map { String($0.prefix(6)) } } == ["bad si", "header"], "one attempt each: 401 is never retried")
        #expect(f.sleeps.list.isEmpty)
        #expect(f.recordCount == records)
    }

    @Test func aWindowAppleCannotAnswerIsRefusedBeforeAnyRequest() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let client = try f.client()
        #expect(Ledger.notificationHistoryRetention(.production) == 180 * f.day)
        #expect(Ledger.notificationHistoryRetention(.sandbox) == 30 * f.day)
        #expect {
            try f.ledger.backfillNotifications(from: client, since: f.now - 31 * f.day, until: f.now, clock: { f.now })
        } throws: { error in
            "\(error)".contains("more than 30 days ago") && "\(error)".contains("Apple keeps Sandbox notification history for 30 days")
        }
        #expect(throws: Ledger.BackfillWindowError.self) {
            try f.ledger.backfillNotifications(from: client, since: f.now, until: f.now - 1, clock: { f.now })
        }
        #expect(f.server.requests.isEmpty)
        // The oldest accepted start is exactly the retention.
        #expect(throws: Never.self) { try f.ledger.checkBackfillWindow(since: f.now - 30 * f.day, until: f.now, now: f.now) }
    }

    @Test func invalidSignedPayloadsAreCountedAndChangeNothing() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        try f.purchase("alice", otid: Self.otid, at: f.now - 10 * f.day)
        let good = try f.notification("DID_RENEW", uuid: "uuid-good", otid: Self.otid, transactionId: "2000000000000111", at: f.now - f.day)
        var parts = good.split(separator: ".").map(String.init)
        parts[2] = String(parts[2].reversed())
        f.server.add(notification: parts.joined(separator: "."), signedDate: f.now - 3 * f.day)
        f.server.add(notification: "not-a-jws", signedDate: f.now - 2 * f.day)
        f.server.add(notification: good, signedDate: f.now - f.day)
        let records = f.recordCount
        let summary = try f.ledger.backfillNotifications(from: try f.client(), since: f.now - 5 * f.day, until: LedgerTime.now() + 1_000)
        #expect(counts(summary) == [3, 1, 0, 2])
        #expect(summary.byType["unverified"]?.invalid == 2)
        #expect(summary.invalidReasons.keys.allSatisfy { $0.hasPrefix("invalid-jws-format") || $0.hasPrefix("verification-failed") })
        #expect(f.recordCount == records + 1, "only the valid DID_RENEW was recorded (one record: fact, grant, decision)")
    }
}

/// fetched, new, duplicate, invalid.
func counts(_ summary: Ledger.BackfillSummary) -> [Int] { [summary.fetched, summary.new, summary.duplicate, summary.invalid] }

/// An ES256 key from the test certificate directory.
func ES256PrivateKeyFromFile(_ name: String) throws -> ES256PrivateKey {
    try ES256PrivateKey(pem: String(decoding: try AppleAPIFixture.file(name), as: UTF8.self))
}
