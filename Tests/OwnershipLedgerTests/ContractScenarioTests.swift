import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

/// The binding contract's scenarios through the library API (the protocol handler of `ledger submit`).
@Suite struct ContractScenarioTests {
    let ledger: Ledger
    let directory: TemporaryDirectory
    let submit: SubmitProtocol
    let t = Fixtures.start
    let day = Fixtures.day

    init() throws {
        (ledger, directory) = try Fixtures.ledger()
        submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
    }

    @discardableResult
    func send(_ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }

    @discardableResult
    func purchase(_ uid: String, _ otid: String, at: Int64, type: String = "purchase", tid: String? = nil, ownership: String = "PURCHASED")
        -> [String: Any]
    {
        send(["type": type, "account": uid, "transaction": Fixtures.transaction(otid, transactionId: tid, at: at, ownership: ownership), "at": at])
    }

    func activeProducts(_ uid: String, at: Int64) throws -> [String] {
        try ledger.account(uid: uid, at: at).entitlements.filter(\.active).map(\.productId)
    }

    func head() throws -> UInt64 { try ledger.store.head().sequence }

    func expectIntact() throws { try ledger.expectIntact() }

    @Test func purchaseBindsAndGrantsToTheAuthenticatedAccountOnly() throws {
        defer { directory.remove() }
        let response = purchase("alice", "1001", at: t)
        #expect(response["decision"] as? String == "granted")
        #expect(response["code"] as? String == "ok")
        #expect((response["entitlement"] as? [String: Any])?["active"] as? Bool == true)
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "alice")
        #expect(try activeProducts("alice", at: t + day) == ["com.myrecipes.premium.monthly"])
        try expectIntact()
    }

    @Test func sameAccountRenewalAndRestoreRefreshTheEntitlement() throws {
        defer { directory.remove() }
        purchase("alice", "1001", at: t)
        let renewal = purchase("alice", "1001", at: t + 30 * day, type: "renewal", tid: "1002")
        #expect(renewal["decision"] as? String == "granted")
        #expect((renewal["entitlement"] as? [String: Any])?["expiresAt"] as? String == LedgerTime.format(t + 60 * day))
        let restore = purchase("alice", "1001", at: t + 31 * day, type: "restore", tid: "1002")
        #expect(restore["decision"] as? String == "granted")
        #expect(try activeProducts("alice", at: t + 59 * day) == ["com.myrecipes.premium.monthly"])
        try expectIntact()
    }

    @Test func deviceAPurchaseThenDeviceBRestoreWithTheSameAccountSucceeds() throws {
        defer { directory.remove() }
        // Device identity is not an input: the two devices differ only in when they ask.
        #expect(purchase("alice", "1001", at: t)["decision"] as? String == "granted")
        #expect(purchase("alice", "1001", at: t + 60_000, type: "restore")["decision"] as? String == "granted")
        let bySomeoneElse = purchase("bob", "1001", at: t + 120_000, type: "restore")
        #expect(bySomeoneElse["code"] as? String == "permission-denied")
        try expectIntact()
    }

    @Test func restoreFromAnotherAccountIsDeniedMovesNothingAndIsRecorded() throws {
        defer { directory.remove() }
        purchase("alice", "1001", at: t)
        let before = try head()
        let response = purchase("bob", "1001", at: t + 3_600_000, type: "restore")
        #expect(response["decision"] as? String == "denied")
        #expect(response["code"] as? String == "permission-denied")
        let message = try #require(response["message"] as? String)
        #expect(message.contains("belongs to another MyRecipes account"))
        #expect(message.contains("contact support"))
        #expect(response["entitlement"] == nil)
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "alice")
        #expect(try activeProducts("alice", at: t + day) == ["com.myrecipes.premium.monthly"])
        #expect(try ledger.account(uid: "bob", at: t + day).entitlements.isEmpty)
        // The denial itself is recorded.
        #expect(try head() > before)
        let decision = try ledger.store.records(from: before + 1).last?.events.last
        #expect(
            try decision
                == .decisionIssued(
                    DecisionIssued(
                        reason: .boundToAnotherAccount, lineage: ledger.lineage(originalTransactionId: "1001"),
                        account: try ledger.pseudonym(ofUID: "bob"))))
        try expectIntact()
    }

    @Test func sameDeviceAccountSwitchDeniesTheSecondAccountAndKeepsTheFirstEntitled() throws {
        defer { directory.remove() }
        purchase("A", "2001", at: t)
        let switched = purchase("B", "2001", at: t + 600_000, type: "restore")
        #expect(switched["code"] as? String == "permission-denied")
        #expect(try activeProducts("A", at: t + 700_000) == ["com.myrecipes.premium.monthly"])
        #expect(try activeProducts("B", at: t + 700_000) == [])
        try expectIntact()
    }

    @Test func deletionWithActiveBillingTombstonesAndNothingGrantsAfterwards() throws {
        defer { directory.remove() }
        let uid = "carol-uid-7f3a9c"
        purchase(uid, "2000000000003001", at: t)
        let deletion = send(["type": "delete-account", "account": uid, "at": t + day])
        #expect(deletion["decision"] as? String == "recorded")
        #expect(deletion["appleBillingContinues"] as? Bool == true)
        #expect((deletion["message"] as? String)?.contains("does not cancel Apple billing") == true)
        let binding = try ledger.binding(originalTransactionId: "2000000000003001")
        #expect(binding.state == "tombstoned")
        #expect(binding.uid == nil)
        // Apple keeps billing: the renewal grants nobody.
        let renewal = send([
            "type": "notification", "at": t + 30 * day,
            "notification": Fixtures.notification(
                "DID_RENEW", uuid: "n-1", transaction: Fixtures.transaction("2000000000003001", transactionId: "2000000000003002", at: t + 30 * day),
                at: t + 30 * day),
        ])
        #expect(renewal["decision"] as? String == "ignored")
        #expect(renewal["code"] as? String == "tombstoned")
        // A new account restoring the still-active purchase is denied and told about support.
        let restore = purchase("dave", "2000000000003001", at: t + 31 * day, type: "restore", tid: "2000000000003002")
        #expect(restore["code"] as? String == "permission-denied")
        #expect((restore["message"] as? String)?.contains("support") == true)
        #expect(try ledger.account(uid: "dave", at: t + 31 * day).entitlements.isEmpty)
        // The same UID coming back is a new, unlinked account with nothing.
        #expect(try ledger.account(uid: uid).known == false)
        // No UID is left anywhere in the store (its files, or every table of its database).
        #expect(try !Fixtures.storeContains(ledger, uid))
        #expect(try !Fixtures.storeContains(ledger, "2000000000003001"))
        try expectIntact()
    }

    @Test(arguments: ["purchase", "restore", "renewal"])
    func familySharingIsRejected(type: String) throws {
        defer { directory.remove() }
        let response = purchase("erin", "4001", at: t, type: type, ownership: "FAMILY_SHARED")
        #expect(response["decision"] as? String == "denied")
        #expect(response["code"] as? String == "family-sharing-unsupported")
        #expect(try ledger.binding(originalTransactionId: "4001").state == "unbound")
        #expect(try ledger.account(uid: "erin").entitlements.isEmpty)
        #expect(response["seq"] != nil, "the rejection is recorded")
        try expectIntact()
    }

    @Test func familySharingIsRejectedInANotificationForABoundLineage() throws {
        defer { directory.remove() }
        purchase("alice", "4002", at: t)
        let response = send([
            "type": "notification", "at": t + day,
            "notification": Fixtures.notification(
                "DID_RENEW", uuid: "fs-1", transaction: Fixtures.transaction("4002", transactionId: "4003", at: t + day, ownership: "FAMILY_SHARED"),
                at: t + day),
        ])
        #expect(response["code"] as? String == "family-sharing-unsupported")
        #expect(try ledger.account(uid: "alice").entitlements.first?.expiresAt == t + 30 * day)
        try expectIntact()
    }

    @Test func duplicateNotificationDeliveryChangesNothingAndReturnsTheFirstDecision() throws {
        defer { directory.remove() }
        purchase("alice", "5001", at: t)
        let notification = Fixtures.notification(
            "DID_RENEW", uuid: "dup-1", transaction: Fixtures.transaction("5001", transactionId: "5002", at: t + 30 * day), at: t + 30 * day)
        let first = send(["type": "notification", "notification": notification, "at": t + 30 * day])
        let head = try head()
        let second = send(["type": "notification", "notification": notification, "at": t + 31 * day])
        #expect(try self.head() == head)
        #expect(second["decision"] as? String == first["decision"] as? String)
        #expect(second["seq"] as? Int == first["seq"] as? Int)
        #expect(second["duplicate"] as? Bool == true)
        // A retried verifier submission behaves the same.
        let retry = purchase("alice", "5001", at: t)
        #expect(retry["duplicate"] as? Bool == true)
        #expect(try self.head() == head)
    }

    @Test func notificationsNeverBindAnUnboundLineage() throws {
        defer { directory.remove() }
        let response = send([
            "type": "notification", "at": t,
            "notification": Fixtures.notification("SUBSCRIBED", uuid: "s-1", transaction: Fixtures.transaction("6001", at: t), at: t),
        ])
        #expect(response["decision"] as? String == "ignored")
        #expect(response["code"] as? String == "not-bound")
        #expect(try ledger.binding(originalTransactionId: "6001").state == "unbound")
    }

    @Test func notificationsEndRevokeAndReinstateTheBoundAccount() throws {
        defer { directory.remove() }
        purchase("alice", "7001", at: t)
        func notify(_ type: String, _ uuid: String, revokedAt: Int64? = nil) -> [String: Any] {
            send([
                "type": "notification", "at": t + day,
                "notification": Fixtures.notification(
                    type, uuid: uuid, transaction: Fixtures.transaction("7001", at: t, revokedAt: revokedAt), at: t + day),
            ])
        }
        #expect(notify("REFUND", "r1", revokedAt: t + day)["code"] as? String == "ok")
        #expect(try activeProducts("alice", at: t + 2 * day) == [])
        #expect(notify("REFUND_REVERSED", "r2")["decision"] as? String == "granted")
        #expect(try activeProducts("alice", at: t + 2 * day) == ["com.myrecipes.premium.monthly"])
        #expect(notify("DID_CHANGE_RENEWAL_STATUS", "r3")["decision"] as? String == "recorded")
        #expect(notify("EXPIRED", "r4")["decision"] as? String == "recorded")
        #expect(try activeProducts("alice", at: t + 2 * day) == [])
        try expectIntact()
    }

    /// The issue's out-of-order case: business times out of arrival order. Every point-in-time tool
    /// cuts on `recordedAt` (what the ledger knew at T), so account, binding, explain and replay agree.
    @Test func pointInTimeToolsAgreeWhenBusinessTimesArriveOutOfOrder() throws {
        defer { directory.remove() }
        let clock = ManualClock(t + 2 * day)
        let (ledger, other) = try Fixtures.ledger(clock: clock.function)
        defer { other.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        func send(_ object: [String: Any], recordedAt: Int64) {
            clock.now = recordedAt
            #expect(Fixtures.object(submit.respond(to: Fixtures.line(object)))["decision"] as? String != "invalid")
        }
        // Recorded on days 2, 4 and 6; the callers said days 10, 5 and 1.
        send(
            ["type": "purchase", "account": "x", "transaction": Fixtures.transaction("111", at: t + 10 * day), "at": t + 10 * day],
            recordedAt: t + 2 * day)
        send(
            ["type": "restore", "account": "y", "transaction": Fixtures.transaction("111", at: t + 5 * day), "at": t + 5 * day],
            recordedAt: t + 4 * day)
        send(["type": "purchase", "account": "z", "transaction": Fixtures.transaction("222", at: t + day), "at": t + day], recordedAt: t + 6 * day)
        let day3 = t + 3 * day
        // At day 3 the ledger knew record 1 only: x bound and entitled, nothing else.
        #expect(try ledger.account(uid: "x", at: day3).entitlements.map(\.active) == [true])
        let binding = try ledger.binding(originalTransactionId: "111", at: day3)
        #expect(binding.state == "bound" && binding.uid == "x" && binding.entitlement?.active == true)
        #expect(try ledger.explain(uid: "x", originalTransactionId: "111", at: day3).verdict == .entitled)
        #expect(try ledger.replayLineage(originalTransactionId: "111", until: .time(day3)).map(\.sequences) == [[1]])
        // Nothing of lineage 222 (recorded day 6) nor y's denied restore (day 4) is known yet.
        #expect(try ledger.account(uid: "z", at: day3).entitlements.isEmpty)
        #expect(try ledger.binding(originalTransactionId: "222", at: day3).state == "unbound")
        #expect(try ledger.explain(uid: "z", originalTransactionId: "222", at: day3).verdict == .neverSeen)
        #expect(try ledger.replayLineage(originalTransactionId: "222", until: .time(day3)).isEmpty)
        #expect(try ledger.explain(uid: "y", originalTransactionId: "111", at: day3).cited == [1], "y's restore (record 2) is not known yet")
        // Before anything was recorded, every tool says so.
        #expect(try ledger.binding(originalTransactionId: "111", at: t + day).state == "unbound")
        #expect(try ledger.explain(uid: "x", originalTransactionId: "111", at: t + day).verdict == .neverSeen)
        #expect(try ledger.account(uid: "x", at: t + day).entitlements.isEmpty)
        // After the last record, the whole history: y's restore denied.
        #expect(try ledger.explain(uid: "y", originalTransactionId: "111", at: t + 7 * day).verdict == .denied)
        #expect(try ledger.replayLineage(originalTransactionId: "111", until: .time(t + 7 * day)).count == 2)
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func anEntitlementIsActiveOnlyBeforeItsLatestVerifiedExpiry() throws {
        defer { directory.remove() }
        purchase("alice", "8001", at: t)
        #expect(try activeProducts("alice", at: t + 29 * day) == ["com.myrecipes.premium.monthly"])
        #expect(try activeProducts("alice", at: t + 30 * day) == [])
        // An older transaction arriving late never shortens it.
        purchase("alice", "8001", at: t - 10 * day, type: "restore", tid: "8000")
        #expect(try ledger.account(uid: "alice").entitlements.first?.expiresAt == t + 30 * day)
    }

    @Test(arguments: [
        ("not json", "line is not a valid JSON object"),
        (#"{"type":"purchase"}"#, "account"),
        (#"{"type":"refund","account":"a"}"#, "type refund"),
        (#"{"type":"purchase","account":"a","transaction":{"originalTransactionId":"1"}}"#, "transaction is missing"),
        (#"{"type":"purchase","account":"a","transaction":{},"signedTransaction":"x"}"#, "exactly one"),
        (#"{"type":"purchase","account":"a","deviceId":"D"}"#, "unknown field deviceId"),
        (#"{"type":"delete-account","account":7}"#, "account"),
        (#"{"type":"purchase","account":"a","at":"yesterday","transaction":{}}"#, "at must be"),
    ])
    func malformedLinesAreInvalidNameTheProblemAndAppendNothing(line: String, mentions: String) throws {
        defer { directory.remove() }
        let response = Fixtures.object(submit.respond(to: line))
        #expect(response["decision"] as? String == "invalid")
        #expect((response["message"] as? String)?.contains(mentions) == true, "\(response)")
        #expect(try head() == 0)
    }

    @Test func decodedInputIsRefusedWithoutTrustAndForeignBundlesAlways() throws {
        defer { directory.remove() }
        let strict = SubmitProtocol(ledger: ledger, trustDecoded: false)
        let line = Fixtures.line(["type": "purchase", "account": "a", "transaction": Fixtures.transaction("9001", at: t), "id": 42])
        let refused = Fixtures.object(strict.respond(to: line))
        #expect(refused["decision"] as? String == "invalid")
        #expect(refused["code"] as? String == "verification-failed")
        #expect(refused["id"] as? Int == 42)
        let foreign = send(["type": "purchase", "account": "a", "transaction": Fixtures.transaction("9001", at: t, bundleId: "com.other")])
        #expect(foreign["code"] as? String == "invalid-app-identifier")
        let production = send(["type": "purchase", "account": "a", "transaction": Fixtures.transaction("9001", at: t, environment: "Production")])
        #expect(production["code"] as? String == "invalid-environment")
        #expect(try head() == 0)
    }
}

extension ContractScenarioTests {
    @Test func anOlderTransactionOfAnotherProductChangesNeitherProductNorExpiry() throws {
        defer { directory.remove() }
        var yearly = Fixtures.transaction("4300", transactionId: "4301", at: t + day, days: 365)
        yearly["productId"] = "com.myrecipes.premium.yearly"
        send(["type": "purchase", "account": "alice", "transaction": yearly, "at": t + day])
        var monthly = Fixtures.transaction("4300", transactionId: "4300", at: t)
        monthly["productId"] = "com.myrecipes.basic.monthly"
        send(["type": "restore", "account": "alice", "transaction": monthly, "at": t + 2 * day])
        let entitlement = try #require(try ledger.account(uid: "alice").entitlements.first)
        #expect(entitlement.productId == "com.myrecipes.premium.yearly")
        #expect(entitlement.expiresAt == t + day + 365 * day)
    }

    @Test(arguments: ["type", "expiresDate"])
    func nonSubscriptionTransactionsAreInvalid(field: String) throws {
        defer { directory.remove() }
        var transaction = Fixtures.transaction("4400", at: t)
        if field == "type" { transaction["type"] = "Non-Consumable" } else { transaction["expiresDate"] = nil }
        let answer = send(["type": "purchase", "account": "alice", "transaction": transaction, "at": t])
        #expect(answer["decision"] as? String == "invalid", "\(answer)")
        #expect(try ledger.binding(originalTransactionId: "4400").state == "unbound")
    }
}
