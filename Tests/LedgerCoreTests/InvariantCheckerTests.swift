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
        mutating func add(_ events: LedgerEvent...) -> UInt64 { add(contentsOf: events) }

        @discardableResult
        mutating func add(contentsOf events: [LedgerEvent]) -> UInt64 {
            let sequence = UInt64(records.count + 1)
            records.append(Record(sequence: sequence, recordedAt: 0, at: 0, command: .zero, attempt: 0, events: events))
            return sequence
        }

        var violations: [InvariantViolation] { get throws { try InvariantChecker.check(records) } }

        /// With signatures checked by ``fakeSignatures``.
        var signedViolations: [InvariantViolation] { get throws { try InvariantChecker.check(records, signatures: fakeSignatures) } }
    }

    /// Stand-in cryptography: a "signature" is the signer's public key followed by the message's
    /// first byte count; every plan digest is `digest(9)`.
    static let fakeSignatures = InvariantChecker.SignatureChecks(
        verify: { key, message, signature in signature == signatureOf(key, message) }, sha256: { _ in Samples.digest(9).bytes })

    static func signatureOf(_ key: [UInt8], _ message: [UInt8]) -> [UInt8] { key + [UInt8(truncatingIfNeeded: message.count)] }

    static func key(_ byte: UInt8) -> [UInt8] { [UInt8](repeating: byte, count: 32) }

    /// An enrolment of `staff` (key `byte`) signed by `admin` (key `adminByte`) after record `after`,
    /// co-signed by `coAdmin` when given.
    static func enrolled(
        _ staff: String, _ roles: StaffRoles, key byte: UInt8, by admin: String?, _ adminByte: UInt8, after: UInt64,
        coSignedBy coAdmin: (String, UInt8)? = nil
    ) -> LedgerEvent {
        var e = StaffEnrolled(
            staff: staff, roles: roles, publicKey: key(byte), ownAccount: nil, enrolledBy: admin, signature: [],
            signedAfter: admin == nil ? nil : after)
        if admin != nil { e.signature = signatureOf(key(adminByte), e.signedMessage) }
        if let (coAdmin, coByte) = coAdmin { (e.coSignedBy, e.coSignature) = (coAdmin, signatureOf(key(coByte), e.signedMessage)) }
        return .staffEnrolled(e)
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

    /// Applied by ops-ana (key 2), signed unless `signed` is false.
    static func applied(_ plan: TransferPlan = plan, signed: Bool = true) -> LedgerEvent {
        var e = TransferApplied(
            caseId: plan.caseId, planDigest: S.digest(9), lineage: plan.lineage, source: plan.source, target: plan.target,
            appliedBy: "ops-ana")
        if signed { e.signature = signatureOf(key(2), e.signedMessage) }
        return .transferApplied(e)
    }

    /// alice buys the lineage at 1 000; root (set at init) enrols a second administrator, sam; root
    /// and sam enrol an operator and an approver, and they request and approve moving it to bob.
    static func approvedTransfer() -> History {
        var history = History()
        let purchase = facts(purchasedAt: 1_000)
        history.add(
            submitted(.purchase, by: S.alice, purchase), .lineageBound(lineage: S.lineage, account: S.alice), granted(S.alice, purchase),
            .decisionIssued(DecisionIssued(reason: .bound, lineage: S.lineage, account: S.alice)))
        history.add(enrolled("root", .administrator, key: 1, by: nil, 0, after: 1))
        history.add(enrolled("sam", .administrator, key: 4, by: "root", 1, after: 2))
        history.add(enrolled("ops-ana", .operator_, key: 2, by: "root", 1, after: 3, coSignedBy: ("sam", 4)))
        history.add(enrolled("ops-ben", .approver, key: 3, by: "sam", 4, after: 4, coSignedBy: ("root", 1)))
        let digest = S.digest(9).bytes
        history.add(
            .transferRequested(TransferRequested(plan: plan, planDigest: S.digest(9), requestedBy: "ops-ana", signature: signatureOf(key(2), digest)))
        )
        history.add(
            .transferApproved(
                TransferApproved(caseId: plan.caseId, planDigest: S.digest(9), approvedBy: "ops-ben", signature: signatureOf(key(3), digest))))
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

    @Test func anApplyNeedsTheAppliersSignatureOutsideFormatOneHistory() throws {
        #expect(try Self.appliedTransfer().signedViolations == [])
        var unsigned = Self.approvedTransfer()
        let apply = unsigned.add(
            .entitlementEnded(lineage: S.lineage, account: S.alice, reason: .transferred), Self.applied(signed: false))
        #expect(try unsigned.signedViolations.map(\.sequence) == [apply])
        #expect(try unsigned.signedViolations.first?.message.contains("without a valid apply signature") == true)

        // The same history copied from format 1 by an upgrade: a note, not a violation.
        var upgraded = History()
        upgraded.add(.storeUpgraded(StoreUpgraded(fromFormat: 1, records: 40, headHash: S.digest(1), merkleRoot: S.digest(2), copiedRecords: 8)))
        for record in unsigned.records { upgraded.add(contentsOf: record.events) }
        var checker = InvariantChecker(signatures: Self.fakeSignatures)
        for record in upgraded.records { try checker.check(record) }
        #expect(checker.violations == [])
        // sam's enrolment by root alone (the bootstrap) and the unsigned apply.
        #expect(checker.formatOneNotes.map(\.sequence) == [4, 9])
        #expect(checker.formatOneNotes.last?.message.contains("no apply signature") == true)
        // After the copied history, the same unsigned apply is a violation again.
        let late = upgraded.add(contentsOf: [Self.applied(signed: false)])
        #expect(try upgraded.signedViolations.contains { $0.sequence == late && $0.message.contains("apply signature") })
    }

    // MARK: Invariant 5: two administrators for every roster change after the bootstrap

    @Test func rosterChangesNeedASecondAdministratorOnceThereAreTwo() throws {
        var history = Self.approvedTransfer()
        #expect(try history.signedViolations == [])
        // root alone enrols someone while root and sam are administrators.
        let alone = history.add(Self.enrolled("ops-cy", .operator_, key: 5, by: "root", 1, after: 7))
        // sam "co-signs" with root's key, and root co-signs their own change.
        let sameKey = history.add(Self.enrolled("ops-di", .operator_, key: 6, by: "root", 1, after: 8, coSignedBy: ("sam", 1)))
        let selfCoSigned = history.add(Self.enrolled("ops-ed", .operator_, key: 7, by: "root", 1, after: 9, coSignedBy: ("root", 1)))
        // A co-signed enrolment replayed word for word.
        let replayed = history.add(Self.enrolled("ops-ben", .approver, key: 3, by: "sam", 4, after: 4, coSignedBy: ("root", 1)))
        let violations = try history.signedViolations
        #expect(violations.map(\.sequence) == [alone, sameKey, selfCoSigned, replayed, replayed])
        #expect(violations[0].message.contains("second-administrator") || violations[0].message.contains("alone"))
        #expect(violations[1].message.contains("co-administrator-signature"))
        #expect(violations[2].message.contains("co-administrator-independent"))
        #expect(violations[3].message.contains("replayed signature"))

        // With one administrator, only a second administrator can be enrolled.
        var bootstrap = History()
        bootstrap.add(Self.enrolled("root", .administrator, key: 1, by: nil, 0, after: 0))
        let operatorFirst = bootstrap.add(Self.enrolled("ops-ana", .operator_, key: 2, by: "root", 1, after: 1))
        bootstrap.add(Self.enrolled("sam", .administrator, key: 4, by: "root", 1, after: 2))
        #expect(try bootstrap.signedViolations.map(\.sequence) == [operatorFirst])
        #expect(try bootstrap.signedViolations.first?.message.contains("bootstrap") == true)
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
