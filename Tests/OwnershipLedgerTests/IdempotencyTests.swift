import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

/// Retries are answered with their first decision only while they cannot change anything.
@Suite struct IdempotencyTests {
    let staffed: StaffedLedger
    var ledger: Ledger { staffed.ledger }
    var directory: TemporaryDirectory { staffed.directory }
    let t = Fixtures.start
    let day = Fixtures.day

    init() throws { staffed = try StaffedLedger("ledger-idempotency") }

    @discardableResult
    func send(_ object: [String: Any]) -> [String: Any] { staffed.send(object) }

    @Test func aRestoreRetriedAfterASupportTransferIsDecidedAgainAndGrants() throws {
        defer { directory.remove() }
        let transaction = Fixtures.transaction("7000", at: t)
        send(["type": "purchase", "account": "ann", "transaction": transaction, "at": t])
        let restore: [String: Any] = ["type": "restore", "account": "ben", "transaction": transaction, "at": t + day]
        #expect(send(restore)["code"] as? String == "permission-denied")
        // An immediate retry changes nothing and gets the first answer.
        #expect(send(restore)["duplicate"] as? Bool == true)
        let input = TransferRequestInput(
            caseId: "C-7", reason: "lost access; identity confirmed by support", originalTransactionId: "7000", targetUID: "ben",
            targetAuthentication: "re-authenticated with email one-time code", ownershipEvidence: "Apple order id lookup MQ12")
        #expect(try ledger.requestTransfer(input, operator: "olivia", key: staffed.olivia, at: t + 2 * day).accepted)
        #expect(try ledger.approveReviewed(caseId: "C-7", approver: "adam", key: staffed.adam, at: t + 2 * day).accepted)
        #expect(try ledger.applyTransfer(caseId: "C-7", staff: "olivia", key: staffed.olivia, at: t + 3 * day).accepted)
        // The customer's device sends the very same signed transaction again: decided anew, granted.
        let retried = send(restore)
        #expect(retried["decision"] as? String == "granted", "\(retried)")
        #expect(retried["duplicate"] == nil)
        #expect(try ledger.account(uid: "ben", at: t + 4 * day).entitlements.first?.active == true)
        // And a retry of that changes nothing.
        let head = try ledger.store.head().sequence
        #expect(send(restore)["duplicate"] as? Bool == true)
        #expect(try ledger.store.head().sequence == head)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func deletingAReusedUIDAgainDeletesTheNewAccount() throws {
        defer { directory.remove() }
        send(["type": "purchase", "account": "zed", "transaction": Fixtures.transaction("9000", at: t), "at": t])
        let deletion: [String: Any] = ["type": "delete-account", "account": "zed", "at": t + day]
        #expect(send(deletion)["decision"] as? String == "recorded")
        #expect(send(deletion)["duplicate"] as? Bool == true, "a retried deletion is answered with the first decision")
        send(["type": "purchase", "account": "zed", "transaction": Fixtures.transaction("8000", at: t + 2 * day), "at": t + 2 * day])
        let again = send(deletion)
        #expect(again["decision"] as? String == "recorded")
        #expect(again["duplicate"] == nil)
        #expect(try ledger.binding(originalTransactionId: "8000").state == "tombstoned")
        #expect(try ledger.account(uid: "zed").known == false)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aUIDDeletedAndUsedAgainInOneWriteGroupKeepsItsNewAccount() throws {
        defer { directory.remove() }
        send(["type": "purchase", "account": "zed", "transaction": Fixtures.transaction("9000", at: t), "at": t])
        let purchase = Ledger.Submission.transaction(
            .purchase, uid: "zed", try Fixtures.payload(Fixtures.transaction("8000", at: t + 2 * day)), .trustedDecoded)
        let decided = try ledger.submit(groups: [([.deleteAccount(uid: "zed")], t + day), ([purchase], t + 2 * day)])
        #expect(decided[1].first?.outcome == .granted)
        #expect(try ledger.account(uid: "zed").known == true)
        #expect(try ledger.binding(originalTransactionId: "8000").uid == "zed")
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func theSameNotificationUUIDWithDifferentContentIsAConflict() throws {
        defer { directory.remove() }
        send(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("6000", at: t), "at": t])
        let renewal = Fixtures.notification(
            "DID_RENEW", uuid: "u-1", transaction: Fixtures.transaction("6000", transactionId: "6001", at: t + day), at: t + day)
        let refund = Fixtures.notification(
            "REFUND", uuid: "u-1", transaction: Fixtures.transaction("6000", transactionId: "6001", at: t + day, revokedAt: t + day), at: t + day)
        // At the business time the notifications speak of: a renewal notice of a transaction already
        // expired at `at` (the wall clock when the line gives none) is recorded `expired`.
        #expect(send(["type": "notification", "notification": renewal, "at": t + day])["decision"] as? String == "granted")
        let head = try ledger.store.head().sequence
        let conflict = send(["type": "notification", "notification": refund, "at": t + day])
        #expect(conflict["decision"] as? String == "invalid")
        #expect(conflict["code"] as? String == "conflict")
        #expect((conflict["message"] as? String)?.contains("u-1") == true)
        #expect(try ledger.store.head().sequence == head)
    }
}

extension IdempotencyTests {
    /// A denial's message tells the customer what to do: a retry denied for another reason is
    /// answered anew, not with the first denial (which would send them to a deleted account).
    @Test func aDeniedRestoreRetriedAfterTheOwnersDeletionGetsTheTombstoneAnswer() throws {
        defer { directory.remove() }
        let transaction = Fixtures.transaction("7100", at: t)
        send(["type": "purchase", "account": "ann", "transaction": transaction, "at": t])
        let restore: [String: Any] = ["type": "restore", "account": "mike", "transaction": transaction, "at": t + day]
        let first = send(restore)
        #expect(first["code"] as? String == "permission-denied")
        send(["type": "delete-account", "account": "ann", "at": t + 2 * day])
        let retried = send(restore)
        #expect(retried["code"] as? String == "permission-denied" && retried["duplicate"] == nil, "\(retried)")
        #expect(retried["message"] as? String != first["message"] as? String, "\(retried)")
        #expect((retried["message"] as? String)?.contains("support recovery") == true, "\(retried)")
        // And a retry of that is a duplicate again.
        #expect(send(restore)["duplicate"] as? Bool == true)
    }

    @Test func aPurchaseRetriedAfterARefundIsDecidedAgainAndDenied() throws {
        defer { directory.remove() }
        let purchase: [String: Any] = ["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("5100", at: t), "at": t]
        #expect(send(purchase)["decision"] as? String == "granted")
        let refund = Fixtures.notification(
            "REFUND", uuid: "r-5100", transaction: Fixtures.transaction("5100", at: t, revokedAt: t + day), at: t + day)
        send(["type": "notification", "notification": refund, "at": t + day])
        let retried = send(purchase)
        #expect(retried["decision"] as? String == "denied", "\(retried)")
        #expect(retried["code"] as? String == "revoked")
        #expect(retried["duplicate"] == nil)
    }
}

extension IdempotencyTests {
    @Test func aRefundedSubscriptionCannotBeTransferred() throws {
        defer { directory.remove() }
        send(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("5200", at: t), "at": t])
        let refund = Fixtures.notification(
            "REFUND", uuid: "r-5200", transaction: Fixtures.transaction("5200", at: t, revokedAt: t + day), at: t + day)
        send(["type": "notification", "notification": refund, "at": t + day])
        let input = TransferRequestInput(
            caseId: "C-52", reason: "customer asks to move a refunded purchase", originalTransactionId: "5200", targetUID: "ben",
            targetAuthentication: "re-authenticated with email one-time code", ownershipEvidence: "Apple order id lookup MQ52")
        let request = try ledger.requestTransfer(input, operator: "olivia", key: staffed.olivia, at: t + 2 * day)
        #expect(!request.accepted)
        #expect(request.checks.contains { $0.name == "not-refunded" && !$0.passed })
        // So the transaction signed before the refund can never grant on another account.
        let restore = send(["type": "restore", "account": "ben", "transaction": Fixtures.transaction("5200", at: t), "at": t + 3 * day])
        #expect(restore["code"] as? String == "permission-denied")
    }
}

extension IdempotencyTests {
    @Test func uidsThatLookLikeAttemptSuffixesNeverShareEventIds() throws {
        defer { directory.remove() }
        for (index, uid) in ["bob@1", "bob", "bob"].enumerated() {
            let otid = "61\(index)"
            send(["type": "purchase", "account": uid, "transaction": Fixtures.transaction(otid, at: t + Int64(index)), "at": t + Int64(index)])
            let deletion = send(["type": "delete-account", "account": uid, "at": t + Int64(index) + 1])
            #expect(deletion["decision"] as? String == "recorded", "\(uid): \(deletion)")
        }
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aPurchaseRetriedAfterItsAccountWasDeletedIsDeniedAndIssuesNoIdentity() throws {
        defer { directory.remove() }
        let purchase: [String: Any] = ["type": "purchase", "account": "zoe", "transaction": Fixtures.transaction("6200", at: t), "at": t]
        #expect(send(purchase)["decision"] as? String == "granted")
        send(["type": "delete-account", "account": "zoe", "at": t + day])
        // The same signed transaction again (an in-flight retry, or StoreKit's cached JWS): the
        // lineage is a tombstone now, so the answer is a denial, never the first "granted".
        let retried = send(purchase.merging(["at": t + 2 * day]) { $1 })
        #expect(retried["decision"] as? String == "denied", "\(retried)")
        #expect(retried["code"] as? String == "permission-denied")
        #expect(retried["entitlement"] == nil)
        #expect(try ledger.account(uid: "zoe").known == false, "no identity is issued to the deleted UID")
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aRetryIsAnsweredWithTheEntitlementAsItStandsNow() throws {
        defer { directory.remove() }
        let purchase: [String: Any] = ["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("6400", at: t), "at": t]
        send(purchase)
        let renewal = Fixtures.notification(
            "DID_RENEW", uuid: "r-6400", transaction: Fixtures.transaction("6400", transactionId: "6401", at: t + 30 * day), at: t + 30 * day)
        send(["type": "notification", "notification": renewal, "at": t + 30 * day])
        let retried = send(purchase.merging(["at": t + 31 * day]) { $1 })
        #expect(retried["duplicate"] as? Bool == true)
        let entitlement = try #require(retried["entitlement"] as? [String: Any])
        #expect(entitlement["expiresAt"] as? String == LedgerTime.format(t + 60 * day))
        #expect(entitlement["active"] as? Bool == true)
        // Once it has expired, the same retry is decided again and says so.
        let late = send(purchase.merging(["at": t + 61 * day]) { $1 })
        #expect(late["decision"] as? String == "recorded", "\(late)")
        #expect(late["code"] as? String == "expired")
    }

    @Test(arguments: ["family_shared", "FAMILY_SHARED ", "", "GIFTED"])
    func unknownOwnershipTypesAreInvalid(ownership: String) throws {
        defer { directory.remove() }
        let answer = send([
            "type": "purchase", "account": "amy", "transaction": Fixtures.transaction("6300", at: t, ownership: ownership), "at": t,
        ])
        #expect(answer["decision"] as? String == "invalid")
        #expect((answer["message"] as? String)?.contains("inAppOwnershipType") == true)
        #expect(try ledger.binding(originalTransactionId: "6300").state == "unbound")
    }
}
