import LedgerCore
import Projections
import Testing

/// Raw histories fed to the invariant checker: each rule the decider keeps is also caught when a
/// history breaks it.
@Suite struct InvariantCheckerTests {
    typealias S = Samples

    /// A history under construction: records numbered from 1, each a command's events.
    struct History {
        var records: [Record] = []

        /// Appends a record of `events` (fact first) and returns its sequence number.
        @discardableResult
        mutating func add(_ events: LedgerEvent...) -> UInt64 {
            let sequence = UInt64(records.count + 1)
            records.append(Record(sequence: sequence, recordedAt: 0, at: 0, command: .zero, attempt: 0, events: events))
            return sequence
        }

        var violations: [InvariantViolation] { get throws { try InvariantChecker.check(records) } }
    }

    static func facts(purchasedAt purchase: Timestamp, key: UInt8 = 0x7E, revokedAt: Timestamp? = nil) -> TransactionFacts {
        TransactionFacts(
            transactionKey: S.key(key), productId: "com.myrecipes.premium.monthly", purchaseDate: purchase,
            expiresDate: purchase + 1_000, revocationDate: revokedAt, ownership: .purchased, environment: "Sandbox",
            signedDate: purchase, provenance: .verifiedJWS)
    }

    static func submitted(_ kind: SubmissionKind, by account: AccountID?, _ facts: TransactionFacts) -> LedgerEvent {
        .transactionSubmitted(TransactionSubmitted(kind: kind, account: account, lineage: S.lineage, transaction: facts))
    }

    static func notified(_ type: String, _ facts: TransactionFacts) -> LedgerEvent {
        .notificationReceived(
            NotificationReceived(
                notificationType: type, subtype: nil, signedDate: facts.signedDate, lineage: S.lineage,
                transaction: facts))
    }

    static func granted(_ account: AccountID, _ facts: TransactionFacts) -> LedgerEvent {
        .entitlementGranted(EntitlementGranted(lineage: S.lineage, account: account, productId: facts.productId, expiresAt: facts.expiresDate))
    }

    static let plan = TransferPlan(
        caseId: "CASE-1", lineage: S.lineage, source: .bound(S.alice), target: S.bob, lineageVersion: 3,
        targetAuthentication: "reauth", ownershipEvidence: "order MQ1", reason: "lost phone")

    static func applied(_ plan: TransferPlan = plan) -> LedgerEvent {
        .transferApplied(
            TransferApplied(
                caseId: plan.caseId, planDigest: S.digest(9), lineage: plan.lineage, source: plan.source, target: plan.target,
                appliedBy: "ops-ana"))
    }

    /// alice buys the lineage at 1 000; an administrator enrols an operator and an approver, and
    /// they request and approve moving it to bob.
    static func approvedTransfer() -> History {
        var history = History()
        let purchase = facts(purchasedAt: 1_000)
        history.add(
            submitted(.purchase, by: S.alice, purchase), .lineageBound(lineage: S.lineage, account: S.alice), granted(S.alice, purchase),
            .decisionIssued(DecisionIssued(reason: .bound, lineage: S.lineage, account: S.alice)))
        history.add(
            .staffEnrolled(StaffEnrolled(staff: "root", roles: .administrator, publicKey: [1], ownAccount: nil, enrolledBy: nil, signature: [])))
        history.add(
            .staffEnrolled(StaffEnrolled(staff: "ops-ana", roles: .operator_, publicKey: [2], ownAccount: nil, enrolledBy: "root", signature: [])))
        history.add(
            .staffEnrolled(StaffEnrolled(staff: "ops-ben", roles: .approver, publicKey: [3], ownAccount: nil, enrolledBy: "root", signature: [])))
        history.add(.transferRequested(TransferRequested(plan: plan, planDigest: S.digest(9), requestedBy: "ops-ana", signature: [])))
        history.add(.transferApproved(TransferApproved(caseId: plan.caseId, planDigest: S.digest(9), approvedBy: "ops-ben", signature: [])))
        return history
    }

    /// `approvedTransfer()` applied as the decider applies it: the old entitlement ends first.
    static func appliedTransfer() -> History {
        var history = approvedTransfer()
        history.add(.entitlementEnded(lineage: S.lineage, account: S.alice, reason: .transferred), applied())
        return history
    }

    // MARK: Invariant 3: a refund is not undone by replaying an earlier transaction

    /// Alice bought at 1,000 and Apple refunded it at 1,500.
    static func refundedPurchase() -> History {
        var history = History()
        let purchase = facts(purchasedAt: 1_000)
        history.add(submitted(.purchase, by: S.alice, purchase), .lineageBound(lineage: S.lineage, account: S.alice), granted(S.alice, purchase))
        history.add(
            notified("REFUND", facts(purchasedAt: 1_000, revokedAt: 1_500)),
            .entitlementRevoked(lineage: S.lineage, account: S.alice, revokedAt: 1_500))
        return history
    }

    @Test func aTransactionFromBeforeTheRefundMustNotGrantTheRevokedEntitlementAgain() throws {
        var history = Self.refundedPurchase()
        let purchase = Self.facts(purchasedAt: 1_000)
        // The signed purchase replayed as a restore, and a renewal purchased exactly at the revocation.
        let replayed = history.add(Self.submitted(.restore, by: S.alice, purchase), Self.granted(S.alice, purchase))
        // (That grant cleared the revocation in the projection; Apple refunds again.)
        history.add(
            Self.notified("REFUND", Self.facts(purchasedAt: 1_000, revokedAt: 1_500)),
            .entitlementRevoked(lineage: S.lineage, account: S.alice, revokedAt: 1_500))
        let atRevocation = Self.facts(purchasedAt: 1_500, key: 0x7F)
        let renewed = history.add(Self.notified("DID_RENEW", atRevocation), Self.granted(S.alice, atRevocation))
        let violations = try history.violations
        #expect(violations.map(\.invariant) == [3, 3])
        #expect(violations.map(\.sequence) == [replayed, renewed])
        #expect(violations.first?.message.contains("before the refund") == true)
    }

    @Test func aReversedRefundOrAPurchaseAfterTheRevocationGrantsAgain() throws {
        var history = Self.refundedPurchase()
        let purchase = Self.facts(purchasedAt: 1_000)
        history.add(
            Self.notified("REFUND_REVERSED", purchase), .entitlementReinstated(lineage: S.lineage, account: S.alice),
            Self.granted(S.alice, purchase))
        history.add(
            Self.notified("REVOKE", Self.facts(purchasedAt: 1_000, revokedAt: 1_600)),
            .entitlementRevoked(lineage: S.lineage, account: S.alice, revokedAt: 1_600))
        let newPurchase = Self.facts(purchasedAt: 1_601, key: 0x7F)
        history.add(Self.submitted(.purchase, by: S.alice, newPurchase), Self.granted(S.alice, newPurchase))
        #expect(try history.violations == [])
    }

    // MARK: Invariant 4: a lineage moved by support grants nothing until its bound account restores

    @Test func aNotificationReconciliationOrOtherAccountMustNotGrantTheTargetOfATransfer() throws {
        let renewal = Self.facts(purchasedAt: 2_000, key: 0x80)
        for cause in [
            Self.notified("DID_RENEW", renewal), Self.notified("REFUND_REVERSED", renewal),
            Self.submitted(.reconciliation, by: nil, renewal), Self.submitted(.restore, by: S.alice, renewal),
        ] {
            var history = Self.appliedTransfer()
            let grant = history.add(cause, Self.granted(S.bob, renewal))
            #expect(try history.violations.map(\.invariant) == [4], "\(cause.name)")
            #expect(try history.violations.map(\.sequence) == [grant])
            #expect(try history.violations.first?.message.contains("without a verified restore") == true)
        }
    }

    @Test func theTargetsOwnVerifiedRestoreGrantsAfterATransfer() throws {
        var history = Self.appliedTransfer()
        let renewal = Self.facts(purchasedAt: 2_000, key: 0x80)
        history.add(Self.submitted(.restore, by: S.bob, renewal), Self.granted(S.bob, renewal))
        let next = Self.facts(purchasedAt: 3_000, key: 0x81)
        history.add(Self.notified("DID_RENEW", next), Self.granted(S.bob, next))
        #expect(try history.violations == [])
    }

    // MARK: Invariant 5: the applied transfer is the approved plan, once

    @Test func anAppliedTransferMustMatchItsPlanAndApplyOnce() throws {
        #expect(try Self.appliedTransfer().violations == [])
        for changed in [
            TransferPlan(
                caseId: "CASE-1", lineage: LineageKey(S.key(0xB2)), source: .bound(S.alice), target: S.bob, lineageVersion: 3,
                targetAuthentication: "reauth", ownershipEvidence: "order MQ1", reason: "lost phone"),
            TransferPlan(
                caseId: "CASE-1", lineage: S.lineage, source: .tombstoned(S.alice), target: S.bob, lineageVersion: 3,
                targetAuthentication: "reauth", ownershipEvidence: "order MQ1", reason: "lost phone"),
            TransferPlan(
                caseId: "CASE-1", lineage: S.lineage, source: .bound(S.alice), target: S.account(0x0C), lineageVersion: 3,
                targetAuthentication: "reauth", ownershipEvidence: "order MQ1", reason: "lost phone"),
        ] {
            var history = Self.approvedTransfer()
            let apply = history.add(.entitlementEnded(lineage: S.lineage, account: S.alice, reason: .transferred), Self.applied(changed))
            let violations = try history.violations.filter { $0.invariant == 5 }
            #expect(violations.map(\.sequence) == [apply], "\(changed)")
            #expect(violations.first?.message.contains("other than its approved plan") == true)
        }
        var twice = Self.appliedTransfer()
        let second = twice.add(Self.applied())
        #expect(try twice.violations.map(\.invariant) == [5])
        #expect(try twice.violations.map(\.sequence) == [second])
        #expect(try twice.violations.first?.message.contains("second time") == true)
    }

    // MARK: Invariant 6: the previous account's entitlement ends before the apply

    @Test func aTransferAppliedWhileThePreviousAccountIsStillEntitledIsFlagged() throws {
        var history = Self.approvedTransfer()
        let apply = history.add(Self.applied())
        #expect(try history.violations.map(\.invariant) == [6])
        #expect(try history.violations.map(\.sequence) == [apply])
    }

    // MARK: Invariant 1: a deleted account stays bound to nothing

    @Test func anAccountDeletedWhileStillBoundIsFlagged() throws {
        var history = History()
        let purchase = Self.facts(purchasedAt: 1_000)
        history.add(
            Self.submitted(.purchase, by: S.alice, purchase), .lineageBound(lineage: S.lineage, account: S.alice),
            Self.granted(S.alice, purchase))
        var tombstoned = history
        let deleted = history.add(.accountDeletionRequested(account: S.alice), .accountDeleted(account: S.alice))
        #expect(try history.violations.map(\.invariant) == [1])
        #expect(try history.violations.map(\.sequence) == [deleted])

        tombstoned.add(
            .accountDeletionRequested(account: S.alice), .entitlementEnded(lineage: S.lineage, account: S.alice, reason: .accountDeleted),
            .lineageTombstoned(lineage: S.lineage, formerAccount: S.alice), .accountDeleted(account: S.alice))
        #expect(try tombstoned.violations == [])
    }

    /// An effect in a record of its own has no cause: each record's effects are judged by its own fact.
    @Test func anEffectIsJudgedByTheFactOfItsOwnRecord() throws {
        var history = History()
        let purchase = Self.facts(purchasedAt: 1_000)
        history.add(Self.submitted(.purchase, by: S.alice, purchase))
        let orphan = history.add(.lineageBound(lineage: S.lineage, account: S.alice))
        #expect(try history.violations.map(\.invariant) == [2])
        #expect(try history.violations.map(\.sequence) == [orphan])
    }
}
