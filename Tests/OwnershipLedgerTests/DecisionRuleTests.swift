import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The decider's rules for refunds and for lineages moved by a support transfer, through the
/// library API: a refund is not undone by replaying an earlier transaction, a refund reversal
/// reinstates only a revoked entitlement, and a transferred lineage grants nothing until its bound
/// account runs Restore Purchases.
@Suite struct DecisionRuleTests {
    let ledger: Ledger
    let directory: TemporaryDirectory
    let submit: SubmitProtocol
    let t = Fixtures.start
    let day = Fixtures.day
    let root: Ed25519PrivateKey
    /// Operator.
    let olivia: Ed25519PrivateKey
    /// Approver.
    let adam: Ed25519PrivateKey

    init() throws {
        let staffed = try StaffedLedger("ledger-decision-rules")
        (ledger, directory, submit) = (staffed.ledger, staffed.directory, staffed.submit)
        (root, olivia, adam) = (staffed.root, staffed.olivia, staffed.adam)
    }

    // MARK: Helpers

    @discardableResult
    func send(_ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }

    /// A purchase, renewal or restore of lineage 1001 by `uid` at `at`, of the transaction `tid` purchased at `purchased`.
    @discardableResult
    func transaction(_ type: String, _ uid: String, tid: String, purchased: Int64, at: Int64) -> [String: Any] {
        send(["type": type, "account": uid, "transaction": Fixtures.transaction("1001", transactionId: tid, at: purchased), "at": at])
    }

    /// A server notification about lineage 1001's transaction `tid` purchased at `purchased`.
    @discardableResult
    func notify(_ type: String, uuid: String, tid: String = "1001", purchased: Int64, revokedAt: Int64? = nil, at: Int64) -> [String: Any] {
        let transaction = Fixtures.transaction("1001", transactionId: tid, at: purchased, revokedAt: revokedAt)
        return send(["type": "notification", "notification": Fixtures.notification(type, uuid: uuid, transaction: transaction, at: at), "at": at])
    }

    /// A reconciliation item for lineage 1001's transaction `tid` purchased at `purchased`.
    func reconcile(tid: String, purchased: Int64, at: Int64) throws -> Decision {
        let payload = try Fixtures.payload(Fixtures.transaction("1001", transactionId: tid, at: purchased))
        return try ledger.submit(.transaction(.reconciliation, uid: nil, payload, .trustedDecoded), at: at)
    }

    func head() throws -> UInt64 { try ledger.store.head().sequence }

    /// The events appended after sequence `after`.
    func events(after: UInt64) throws -> [LedgerEvent] { try ledger.store.records(from: after + 1).flatMap(\.events) }

    func grantsOrReinstatements(after: UInt64) throws -> [String] {
        try events(after: after).map(\.name).filter { $0 == "entitlement-granted" || $0 == "entitlement-reinstated" }
    }

    /// The products `uid` is entitled to through lineage 1001 at `at`, judged on the present state.
    func activeProducts(_ uid: String, at: Int64) throws -> [String] { try ledger.activeProducts(uid, through: "1001", at: at) }

    func expectIntact() throws { try ledger.expectIntact() }

    /// alice buys lineage 1001 at t and refunds it at t + 1 day.
    func refunded() {
        transaction("purchase", "alice", tid: "1001", purchased: t, at: t)
        let refund = notify("REFUND", uuid: "refund-1", purchased: t, revokedAt: t + day, at: t + day)
        #expect(refund["decision"] as? String == "recorded")
    }

    /// alice buys lineage 1001 at t; support moves it to bob at t + 3 days.
    func transferred() throws {
        transaction("purchase", "alice", tid: "1001", purchased: t, at: t)
        let input = TransferRequestInput(
            caseId: "C-1", reason: "customer lost access to the Apple-linked account; ticket 4711", originalTransactionId: "1001",
            targetUID: "bob", targetAuthentication: "firebase re-auth + email OTP to the address on file",
            ownershipEvidence: "Apple order id MK7Q2X9P looked up in App Store Connect")
        #expect(try ledger.requestTransfer(input, operator: "olivia", key: olivia, at: t + day).accepted)
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day).accepted)
        let applied = try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: olivia, at: t + 3 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "bob")
    }

    // MARK: A refund is not undone by an earlier transaction (C2)

    @Test func aRefundIsNotUndoneByReplayingTheTransactionSignedBeforeIt() throws {
        defer { directory.remove() }
        refunded()
        #expect(try activeProducts("alice", at: t + day + 1) == [])
        let before = try head()
        // The purchase's own signed transaction, replayed as a restore.
        let restore = transaction("restore", "alice", tid: "1001", purchased: t, at: t + 2 * day)
        #expect(restore["decision"] as? String == "denied")
        #expect(restore["code"] as? String == "revoked")
        #expect((restore["message"] as? String)?.contains("refunded or revoked") == true)
        #expect(restore["entitlement"] == nil)
        // A transaction purchased exactly at the revocation is no newer.
        let atRevocation = transaction("renewal", "alice", tid: "10010001", purchased: t + day, at: t + 2 * day)
        #expect(atRevocation["code"] as? String == "revoked")
        // A notification and a reconciliation about the refunded transaction.
        let renewal = notify("DID_RENEW", uuid: "renew-1", purchased: t, at: t + 2 * day)
        #expect(renewal["decision"] as? String == "denied")
        #expect(renewal["code"] as? String == "revoked")
        let reconciled = try reconcile(tid: "1001", purchased: t, at: t + 2 * day)
        #expect(reconciled.reason == .refundedTransaction)
        #expect(reconciled.outcome == .denied)
        #expect(try grantsOrReinstatements(after: before) == [])
        #expect(try activeProducts("alice", at: t + 2 * day) == [])
        try expectIntact()
    }

    @Test func aPurchaseAfterTheRevocationOrAReversedRefundGrantsAgain() throws {
        defer { directory.remove() }
        refunded()
        // A genuine renewal purchased after the revocation.
        let renewal = transaction("renewal", "alice", tid: "10010002", purchased: t + 2 * day, at: t + 2 * day)
        #expect(renewal["decision"] as? String == "granted")
        #expect(try activeProducts("alice", at: t + 3 * day) == ["com.myrecipes.premium.monthly"])
        // Refunded again, then Apple reverses the refund: the reversal reinstates it.
        notify("REFUND", uuid: "refund-2", tid: "10010002", purchased: t + 2 * day, revokedAt: t + 3 * day, at: t + 3 * day)
        #expect(try activeProducts("alice", at: t + 3 * day + 1) == [])
        let reversed = notify("REFUND_REVERSED", uuid: "reversed-1", tid: "10010002", purchased: t + 2 * day, at: t + 4 * day)
        #expect(reversed["decision"] as? String == "granted")
        #expect(try activeProducts("alice", at: t + 4 * day) == ["com.myrecipes.premium.monthly"])
        try expectIntact()
    }

    // MARK: REFUND_REVERSED reinstates only a revoked entitlement (I2)

    @Test func aRefundReversalWithoutARevokedEntitlementReinstatesNothing() throws {
        defer { directory.remove() }
        transaction("purchase", "alice", tid: "1001", purchased: t, at: t)
        let before = try head()
        let reversed = notify("REFUND_REVERSED", uuid: "reversed-1", purchased: t, at: t + day)
        #expect(reversed["decision"] as? String == "recorded")
        #expect(reversed["code"] as? String == "ok")
        #expect(try grantsOrReinstatements(after: before) == [])
        #expect(try activeProducts("alice", at: t + day) == ["com.myrecipes.premium.monthly"])
        try expectIntact()
    }

    @Test func aRefundReversalAfterATransferReinstatesNothing() throws {
        defer { directory.remove() }
        try transferred()
        let before = try head()
        let reversed = notify("REFUND_REVERSED", uuid: "reversed-1", purchased: t, at: t + 4 * day)
        #expect(reversed["decision"] as? String == "ignored")
        #expect(reversed["code"] as? String == "awaiting-restore")
        #expect(try grantsOrReinstatements(after: before) == [])
        #expect(try activeProducts("bob", at: t + 4 * day) == [])
        try expectIntact()
    }

    // MARK: A refund is kept through deletion and transfer (C2, I3)

    /// Events named `name` appended after `after`.
    func count(_ name: String, after: UInt64) throws -> Int { try events(after: after).filter { $0.name == name }.count }

    @Test func aRefundWhileAwaitingRestoreIsKeptSoThePreRefundTransactionCannotGrantTheTarget() throws {
        defer { directory.remove() }
        try transferred()
        let before = try head()
        let refund = notify("REFUND", uuid: "refund-awaiting", purchased: t, revokedAt: t + 4 * day, at: t + 4 * day)
        #expect(refund["code"] as? String == "awaiting-restore")
        #expect(try count("entitlement-revoked", after: before) == 1)
        #expect(try ledger.binding(originalTransactionId: "1001").entitlement == nil)
        // The transaction signed before the refund, replayed by the target as its restore.
        let stale = transaction("restore", "bob", tid: "1001", purchased: t, at: t + 5 * day)
        #expect(stale["decision"] as? String == "denied")
        #expect(stale["code"] as? String == "revoked")
        #expect(try grantsOrReinstatements(after: before) == [])
        #expect(try activeProducts("bob", at: t + 5 * day) == [])
        // Apple reverses the refund: recorded, still nothing granted until the target restores.
        let reversed = notify("REFUND_REVERSED", uuid: "reversed-awaiting", purchased: t, at: t + 6 * day)
        #expect(reversed["code"] as? String == "awaiting-restore")
        #expect(try events(after: before).map(\.name).filter { $0 == "entitlement-granted" } == [])
        #expect(try count("entitlement-reinstated", after: before) == 1)
        let restore = transaction("restore", "bob", tid: "1001", purchased: t, at: t + 7 * day)
        #expect(restore["decision"] as? String == "granted", "\(restore)")
        #expect(try activeProducts("bob", at: t + 7 * day) == ["com.myrecipes.premium.monthly"])
        try expectIntact()
    }

    @Test func aRefundAfterTheOwnerDeletedTheAccountIsKeptAndSupportCannotMoveTheLineage() throws {
        defer { directory.remove() }
        transaction("purchase", "alice", tid: "1001", purchased: t, at: t)
        #expect(send(["type": "delete-account", "account": "alice", "at": t + day])["decision"] as? String == "recorded")
        let before = try head()
        let refund = notify("REFUND", uuid: "refund-tombstone", purchased: t, revokedAt: t + 2 * day, at: t + 2 * day)
        #expect(refund["code"] as? String == "tombstoned")
        #expect(try count("entitlement-revoked", after: before) == 1)
        // A revoked transaction submitted to the tombstone records nothing more: the refund is there.
        let revoked = transaction("restore", "carol", tid: "1001", purchased: t, at: t + 3 * day)
        #expect(revoked["code"] as? String == "permission-denied")
        let input = TransferRequestInput(
            caseId: "C-refunded", reason: "customer lost access to the Apple-linked account; ticket 4712", originalTransactionId: "1001",
            targetUID: "bob", targetAuthentication: "firebase re-auth + email OTP to the address on file",
            ownershipEvidence: "Apple order id MK7Q2X9Q looked up in App Store Connect")
        let request = try ledger.requestTransfer(input, operator: "olivia", key: olivia, at: t + 3 * day)
        #expect(!request.accepted)
        #expect(request.checks.first { $0.name == "not-refunded" }?.passed == false, "\(request.checks)")
        #expect(try ledger.binding(originalTransactionId: "1001").state == "tombstoned")
        try expectIntact()
    }

    /// The entitlement a transfer kept is never shown as the lineage's, also once the target's
    /// deletion has tombstoned the lineage before any restore.
    @Test func theEntitlementATransferKeptIsNotShownAfterTheTargetsDeletion() throws {
        defer { directory.remove() }
        try transferred()
        #expect(send(["type": "delete-account", "account": "bob", "at": t + 4 * day])["decision"] as? String == "recorded")
        let binding = try ledger.binding(originalTransactionId: "1001")
        #expect(binding.state == "tombstoned")
        #expect(binding.entitlement == nil)
        try expectIntact()
    }

    @Test func aRefundWhileAwaitingRestoreRefusesAnotherTransferOfTheLineage() throws {
        defer { directory.remove() }
        try transferred()
        notify("REFUND", uuid: "refund-awaiting-2", purchased: t, revokedAt: t + 4 * day, at: t + 4 * day)
        let input = TransferRequestInput(
            caseId: "C-2", reason: "the target account was the wrong one; ticket 4713", originalTransactionId: "1001",
            targetUID: "dave", targetAuthentication: "firebase re-auth + email OTP to the address on file",
            ownershipEvidence: "Apple order id MK7Q2X9R looked up in App Store Connect")
        let request = try ledger.requestTransfer(input, operator: "olivia", key: olivia, at: t + 5 * day)
        #expect(request.checks.first { $0.name == "not-refunded" }?.passed == false, "\(request.checks)")
        try expectIntact()
    }

    // MARK: A transferred lineage waits for the target's verified restore (I3)

    @Test func afterATransferNotificationsAndReconciliationGrantNothingUntilTheTargetRestores() throws {
        defer { directory.remove() }
        try transferred()
        let before = try head()
        let renewal = t + 4 * day
        for type in ["DID_RENEW", "SUBSCRIBED", "OFFER_REDEEMED", "RENEWAL_EXTENDED", "REFUND_REVERSED"] {
            let response = notify(type, uuid: "after-transfer-\(type)", tid: "10010004", purchased: renewal, at: renewal)
            #expect(response["decision"] as? String == "ignored", "\(type): \(response)")
            #expect(response["code"] as? String == "awaiting-restore", "\(type)")
            #expect((response["message"] as? String)?.contains("Restore Purchases") == true, "\(type)")
        }
        let reconciled = try reconcile(tid: "10010004", purchased: renewal, at: renewal)
        #expect(reconciled.reason == .awaitingRestore)
        #expect(reconciled.code == "awaiting-restore")
        #expect(try grantsOrReinstatements(after: before) == [])
        #expect(try activeProducts("bob", at: renewal + 1) == [])
        #expect(try ledger.binding(originalTransactionId: "1001").entitlement == nil)
        // The previous account's restore is still denied; the target's own restore grants.
        #expect(transaction("restore", "alice", tid: "10010004", purchased: renewal, at: renewal)["code"] as? String == "permission-denied")
        let restore = transaction("restore", "bob", tid: "10010004", purchased: renewal, at: renewal + 1)
        #expect(restore["decision"] as? String == "granted")
        #expect(try activeProducts("bob", at: renewal + 2) == ["com.myrecipes.premium.monthly"])
        // From then on notifications refresh the target as for any bound account.
        let next = notify("DID_RENEW", uuid: "after-restore", tid: "10010005", purchased: t + 34 * day, at: t + 34 * day)
        #expect(next["decision"] as? String == "granted")
        #expect(try activeProducts("bob", at: t + 40 * day) == ["com.myrecipes.premium.monthly"])
        try expectIntact()
    }
}
