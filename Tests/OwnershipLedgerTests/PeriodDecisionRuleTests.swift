import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The decider's rules for transactions of a period other than the one the entitlement grants
/// (review 27: apple F1, contract F1–F5, F9), through the submit protocol: an upgrade takes effect at
/// once; an upgraded transaction grants, binds and revokes nothing; a late expiry notice or a refund
/// of an older period leaves the current period alone, while a refund of the current period still
/// revokes it and still blocks replays and support transfers.
@Suite struct PeriodDecisionRuleTests {
    let ledger: Ledger
    let directory: TemporaryDirectory
    let submit: SubmitProtocol
    let t = Fixtures.start
    let day = Fixtures.day
    let olivia: Ed25519PrivateKey
    let adam: Ed25519PrivateKey
    static let basic = "com.myrecipes.basic.yearly"
    static let premium = "com.myrecipes.premium.monthly"

    init() throws {
        let staffed = try StaffedLedger("ledger-period-rules")
        (ledger, directory, submit) = (staffed.ledger, staffed.directory, staffed.submit)
        (olivia, adam) = (staffed.olivia, staffed.adam)
    }

    // MARK: Helpers

    @discardableResult
    func send(_ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }

    /// A decoded transaction of lineage 1001.
    func tx(
        _ tid: String, _ product: String = premium, purchased: Int64, expires: Int64, upgraded: Bool = false, revokedAt: Int64? = nil
    ) -> [String: Any] {
        var object = Fixtures.transaction("1001", transactionId: tid, at: purchased, revokedAt: revokedAt)
        object["productId"] = product
        object["expiresDate"] = expires
        if upgraded { object["isUpgraded"] = true }
        return object
    }

    @discardableResult
    func submitted(_ type: String, _ uid: String, _ transaction: [String: Any], at: Int64) -> [String: Any] {
        send(["type": type, "account": uid, "transaction": transaction, "at": at])
    }

    @discardableResult
    func notify(_ type: String, uuid: String, _ transaction: [String: Any], at: Int64) -> [String: Any] {
        send(["type": "notification", "notification": Fixtures.notification(type, uuid: uuid, transaction: transaction, at: at), "at": at])
    }

    func reconcile(_ transaction: [String: Any], at: Int64) throws -> Decision {
        try ledger.submit(.transaction(.reconciliation, uid: nil, try Fixtures.payload(transaction), .trustedDecoded), at: at)
    }

    func head() throws -> UInt64 { try ledger.store.head().sequence }

    func eventNames(after: UInt64) throws -> [String] { try ledger.store.records(from: after + 1).flatMap(\.events).map(\.name) }

    func entitlement() throws -> Entitlement? {
        let lineage = try ledger.lineage(originalTransactionId: "1001")
        return try ledger.state(lineages: [lineage], accounts: [], asOf: nil).lineage(lineage).entitlement
    }

    /// The products `uid` is entitled to through lineage 1001 at `at`, judged on the present state.
    func activeProducts(_ uid: String, at: Int64) throws -> [String] { try ledger.activeProducts(uid, through: "1001", at: at) }

    func expectIntact() throws { try ledger.expectIntact() }

    /// alice buys a yearly basic subscription at t, then upgrades at t + 4 days to premium monthly
    /// (same lineage; expires at t + 34 days, long before the yearly would have).
    func upgraded() {
        let bought = submitted("purchase", "alice", tx("1001", Self.basic, purchased: t, expires: t + 365 * day), at: t)
        #expect(bought["decision"] as? String == "granted")
        let upgrade = submitted("purchase", "alice", tx("1002", purchased: t + 4 * day, expires: t + 34 * day), at: t + 4 * day)
        #expect(upgrade["decision"] as? String == "granted", "\(upgrade)")
    }

    // MARK: Upgrades (apple F1, contract F2, F3)

    @Test func anUpgradeTakesEffectAtOnceWithTheNewProductAndExpiry() throws {
        defer { directory.remove() }
        upgraded()
        let entitlement = try #require(try entitlement())
        #expect(entitlement.productId == Self.premium)
        #expect(entitlement.expiresAt == t + 34 * day)
        #expect(entitlement.purchasedAt == t + 4 * day)
        #expect(try activeProducts("alice", at: t + 5 * day) == [Self.premium])
        #expect(try activeProducts("alice", at: t + 35 * day) == [])
        try expectIntact()
    }

    @Test func afterTheUpgradedTierExpiresNoRestoreNorReconciliationGrantsAgain() throws {
        defer { directory.remove() }
        upgraded()
        let expired = notify("EXPIRED", uuid: "expired-premium", tx("1002", purchased: t + 4 * day, expires: t + 34 * day), at: t + 35 * day)
        #expect(expired["decision"] as? String == "recorded")
        let before = try head()
        // The upgraded-away yearly transaction, re-signed with isUpgraded.
        let old = submitted(
            "restore", "alice", tx("1001", Self.basic, purchased: t, expires: t + 365 * day, upgraded: true, revokedAt: t + 4 * day),
            at: t + 36 * day)
        #expect(old["decision"] as? String == "recorded", "\(old)")
        #expect(old["code"] as? String == "upgraded")
        // The lapsed premium transaction itself.
        let lapsed = submitted("restore", "alice", tx("1002", purchased: t + 4 * day, expires: t + 34 * day), at: t + 36 * day)
        #expect(lapsed["code"] as? String == "expired", "\(lapsed)")
        // The App Store's own reconciliation, of either.
        _ = try reconcile(tx("1002", purchased: t + 4 * day, expires: t + 34 * day), at: t + 37 * day)
        _ = try reconcile(tx("1001", Self.basic, purchased: t, expires: t + 365 * day, upgraded: true), at: t + 37 * day)
        #expect(!(try eventNames(after: before)).contains("entitlement-revoked"))
        for at in [t + 36 * day, t + 38 * day, t + 200 * day] { #expect(try activeProducts("alice", at: at) == []) }
        try expectIntact()
    }

    @Test func anUpgradedTransactionIsNeverARefundAndNeverBinds() throws {
        defer { directory.remove() }
        // On an unbound lineage it binds nothing.
        let first = submitted("purchase", "bob", tx("1001", Self.basic, purchased: t, expires: t + 365 * day, upgraded: true), at: t)
        #expect(first["code"] as? String == "upgraded")
        #expect(try ledger.binding(originalTransactionId: "1001").uid == nil)
        upgraded()
        let before = try head()
        let revokedCopy = tx("1001", Self.basic, purchased: t, expires: t + 365 * day, upgraded: true, revokedAt: t + 4 * day)
        #expect(submitted("restore", "alice", revokedCopy, at: t + 5 * day)["code"] as? String == "upgraded")
        #expect(notify("DID_RENEW", uuid: "renew-upgraded", revokedCopy, at: t + 5 * day)["code"] as? String == "upgraded")
        #expect(notify("REFUND", uuid: "refund-upgraded", revokedCopy, at: t + 5 * day)["code"] as? String == "upgraded")
        #expect(!(try eventNames(after: before)).contains("entitlement-revoked"))
        // The owner's own restore and renewal of the new tier still grant.
        let restore = submitted("restore", "alice", tx("1002", purchased: t + 4 * day, expires: t + 34 * day), at: t + 6 * day)
        #expect(restore["decision"] as? String == "granted", "\(restore)")
        #expect(try activeProducts("alice", at: t + 6 * day) == [Self.premium])
        try expectIntact()
    }

    @Test func aLegacyReceiptsUpgradeCancellationIsNotARefund() throws {
        defer { directory.remove() }
        submitted("purchase", "alice", tx("1001", Self.basic, purchased: t, expires: t + 365 * day), at: t)
        func entry(_ tid: String, _ product: String, _ purchased: Int64, _ expires: Int64, extra: [String: Any] = [:]) -> [String: Any] {
            [
                "original_transaction_id": "1001", "transaction_id": tid, "product_id": product, "purchase_date_ms": String(purchased),
                "expires_date_ms": String(expires),
            ].merging(extra) { $1 }
        }
        let receipt: [String: Any] = [
            "status": 0, "environment": "Sandbox", "receipt": ["bundle_id": Fixtures.bundleId],
            "latest_receipt_info": [
                entry(
                    "1001", Self.basic, t, t + 365 * day, extra: ["cancellation_date_ms": String(t + 4 * day), "is_upgraded": "true"]),
                entry("1002", Self.premium, t + 4 * day, t + 34 * day),
            ],
        ]
        let restore = send(["type": "restore", "account": "alice", "receipt": receipt, "at": t + 5 * day])
        #expect(restore["decision"] as? String == "granted", "\(restore)")
        #expect(try activeProducts("alice", at: t + 5 * day) == [Self.premium])
        #expect(try entitlement()?.revokedAt == nil)
        try expectIntact()
    }

    // MARK: Late notices and past-period refunds (contract F1, F4)

    /// alice buys at t; the renewals of t + 30 days and t + 60 days follow (the second by DID_RENEW).
    func renewedTwice() {
        submitted("purchase", "alice", tx("1001", purchased: t, expires: t + 30 * day), at: t)
        submitted("renewal", "alice", tx("1002", purchased: t + 30 * day, expires: t + 60 * day), at: t + 30 * day)
        let renew = notify("DID_RENEW", uuid: "renew-3", tx("1003", purchased: t + 60 * day, expires: t + 90 * day), at: t + 60 * day)
        #expect(renew["decision"] as? String == "granted")
    }

    @Test func aLateExpiryNoticeOfAnOlderPeriodEndsNothing() throws {
        defer { directory.remove() }
        renewedTwice()
        let before = try head()
        for type in ["EXPIRED", "GRACE_PERIOD_EXPIRED"] {
            let late = notify(type, uuid: "late-\(type)", tx("1002", purchased: t + 30 * day, expires: t + 60 * day), at: t + 61 * day)
            #expect(late["decision"] as? String == "recorded")
            #expect(late["message"] as? String == DecisionReason.notificationRecorded.message)
        }
        #expect(!(try eventNames(after: before)).contains("entitlement-ended"))
        #expect(try activeProducts("alice", at: t + 75 * day) == [Self.premium])
        // The current period's own expiry notice still ends it.
        let current = notify("EXPIRED", uuid: "expired-3", tx("1003", purchased: t + 60 * day, expires: t + 90 * day), at: t + 91 * day)
        #expect(current["message"] as? String == DecisionReason.notificationEnded.message)
        try expectIntact()
    }

    @Test func aPastPeriodRefundLeavesTheCurrentPeriodButACurrentRefundRevokesIt() throws {
        defer { directory.remove() }
        submitted("purchase", "alice", tx("1001", purchased: t, expires: t + 30 * day), at: t)
        submitted("renewal", "alice", tx("1002", purchased: t + 30 * day, expires: t + 60 * day), at: t + 30 * day)
        let before = try head()
        let pastRefund = notify(
            "REFUND", uuid: "refund-1", tx("1001", purchased: t, expires: t + 30 * day, revokedAt: t + 40 * day), at: t + 40 * day)
        #expect(pastRefund["message"] as? String == DecisionReason.notificationRecorded.message)
        #expect(!(try eventNames(after: before)).contains("entitlement-revoked"))
        #expect(
            submitted("restore", "alice", tx("1002", purchased: t + 30 * day, expires: t + 60 * day), at: t + 41 * day)["decision"] as? String
                == "granted")
        #expect(try activeProducts("alice", at: t + 41 * day) == [Self.premium])
        // Support recovery is not blocked by the past refund.
        let input = TransferRequestInput(
            caseId: "C-1", reason: "customer lost access to the Apple-linked account; ticket 4711", originalTransactionId: "1001",
            targetUID: "bob", targetAuthentication: "firebase re-auth + email OTP to the address on file",
            ownershipEvidence: "Apple order id MK7Q2X9P looked up in App Store Connect")
        #expect(try ledger.requestTransfer(input, operator: "olivia", key: olivia, at: t + 42 * day).accepted)
        // A refund of the current period revokes it, and its replay grants nothing.
        let currentRefund = notify(
            "REFUND", uuid: "refund-2", tx("1002", purchased: t + 30 * day, expires: t + 60 * day, revokedAt: t + 43 * day), at: t + 43 * day)
        #expect(currentRefund["message"] as? String == DecisionReason.notificationRevoked.message)
        let replay = submitted("restore", "alice", tx("1002", purchased: t + 30 * day, expires: t + 60 * day), at: t + 44 * day)
        #expect(replay["code"] as? String == "revoked")
        #expect(try activeProducts("alice", at: t + 44 * day) == [])
        let approval = try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 45 * day)
        #expect(!approval.accepted)
        try expectIntact()
    }

    // MARK: Expired answers (contract F5, F9)

    @Test func aRenewalNoticeOfAnExpiredTransactionAndAnExpiredPurchaseSayExpired() throws {
        defer { directory.remove() }
        let bought = submitted("purchase", "alice", tx("1001", purchased: t, expires: t + 30 * day), at: t + 31 * day)
        #expect(bought["code"] as? String == "expired")
        #expect((bought["message"] as? String)?.contains("tied to this MyRecipes account") == true)
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "alice")
        let late = notify("DID_RENEW", uuid: "late-renew", tx("1001", purchased: t, expires: t + 30 * day), at: t + 32 * day)
        #expect(late["decision"] as? String == "recorded", "\(late)")
        #expect(late["code"] as? String == "expired")
        try expectIntact()
    }

    // MARK: Entitlements recorded without a purchase date

    /// A grant recorded before the ledger kept the period decides as before: by expiry.
    @Test func anEntitlementWithoutAPurchaseDateIsJudgedByItsExpiry() {
        defer { directory.remove() }
        let lineage = LineageKey(Key128([UInt8](repeating: 1, count: 16)) ?? .zero)
        let alice = AccountID(Key128([UInt8](repeating: 2, count: 16)) ?? .zero)
        let state = LedgerState(
            lineages: [lineage: LineageState(binding: .bound(alice), entitlement: Entitlement(account: alice, productId: "old", expiresAt: 500))],
            accountLineages: [alice: [lineage]])
        func facts(purchased: Int64, expires: Int64, revokedAt: Int64? = nil) -> TransactionFacts {
            TransactionFacts(
                transactionKey: .zero, productId: "new", purchaseDate: purchased, expiresDate: expires, revocationDate: revokedAt,
                ownership: .purchased, environment: "Sandbox", signedDate: purchased, provenance: .trustedDecoded)
        }
        func grant(_ facts: TransactionFacts) -> EntitlementGranted? {
            let events = Decider.decide(
                .submitTransaction(TransactionSubmitted(kind: .renewal, account: alice, lineage: lineage, transaction: facts)), state: state, at: 0)
            for case .entitlementGranted(let grant) in events { return grant }
            return nil
        }
        // Earlier expiry: kept, period still unknown.
        #expect(grant(facts(purchased: 300, expires: 400)) == EntitlementGranted(lineage: lineage, account: alice, productId: "old", expiresAt: 500))
        // Later expiry: replaced, and the period is known from now on.
        #expect(
            grant(facts(purchased: 450, expires: 600))
                == EntitlementGranted(lineage: lineage, account: alice, productId: "new", expiresAt: 600, purchasedAt: 450))
        // A refund of a transaction expiring earlier is of an older period: nothing revoked.
        let refund = Decider.decide(
            .receiveNotification(
                NotificationReceived(
                    notificationType: "REFUND", subtype: nil, signedDate: 100, lineage: lineage,
                    transaction: facts(purchased: 0, expires: 400, revokedAt: 100))),
            state: state, at: 100)
        #expect(!refund.contains { if case .entitlementRevoked = $0 { true } else { false } })
    }
}
