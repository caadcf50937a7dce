import LedgerCore
import Projections
import Testing

/// One sample of every event case: the catalogue is the storage format.
enum Samples {
    static func digest(_ byte: UInt8) -> Digest32 { Digest32([UInt8](repeating: byte, count: 32)) ?? .zero }
    static let lineage = LineageKey(digest(0xA1))
    static let alice = account(0x0A)
    static let bob = account(0x0B)

    static func account(_ byte: UInt8) -> AccountID {
        // 16 bytes always make an AccountID; the fallback only satisfies the optional.
        AccountID([UInt8](repeating: byte, count: 16)) ?? AccountID(Array(repeating: 0, count: 16)).unsafelyUnwrapped
    }
    static let facts = TransactionFacts(
        transactionKey: digest(0x7E), productId: "com.myrecipes.premium.monthly", purchaseDate: 1_000, expiresDate: 2_000,
        revocationDate: nil, ownership: .purchased, environment: "Sandbox", signedDate: 1_000, provenance: .verifiedJWS)
    static let plan = TransferPlan(
        caseId: "CASE-1", lineage: lineage, source: .tombstoned(alice), target: bob, lineageVersion: 9,
        targetAuthentication: "reauth", ownershipEvidence: "order MQ1", reason: "lost phone")

    static let events: [LedgerEvent] = [
        .transactionSubmitted(TransactionSubmitted(kind: .restore, account: alice, lineage: lineage, transaction: facts)),
        .transactionSubmitted(TransactionSubmitted(kind: .reconciliation, account: nil, lineage: lineage, transaction: facts)),
        .notificationReceived(
            NotificationReceived(
                notificationKey: digest(3), notificationType: "DID_RENEW", subtype: "BILLING_RECOVERY", signedDate: 5,
                lineage: lineage, transaction: facts)),
        .notificationReceived(
            NotificationReceived(notificationKey: digest(4), notificationType: "TEST", subtype: nil, signedDate: 6, lineage: nil, transaction: nil)),
        .accountDeletionRequested(account: alice),
        .lineageBound(lineage: lineage, account: alice),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: "p", expiresAt: nil)),
        .entitlementEnded(lineage: lineage, account: alice, reason: .transferred),
        .entitlementRevoked(lineage: lineage, account: alice, revokedAt: 77),
        .entitlementReinstated(lineage: lineage, account: alice),
        .lineageTombstoned(lineage: lineage, formerAccount: alice),
        .accountDeleted(account: alice),
        .staffEnrolled(
            StaffEnrolled(
                staff: "ops-ana", roles: [.operator_, .approver], publicKey: [UInt8](repeating: 5, count: 32), ownAccount: bob,
                enrolledBy: "admin", signature: [UInt8](repeating: 6, count: 64))),
        .staffRemoved(StaffRemoved(staff: "ops-ana", removedBy: "admin", signature: [1, 2, 3])),
        .transferRequested(TransferRequested(plan: plan, planDigest: digest(9), requestedBy: "ops-ana", signature: [4])),
        .transferApproved(TransferApproved(caseId: "CASE-1", planDigest: digest(9), approvedBy: "ops-ben", signature: [5])),
        .transferApplied(
            TransferApplied(caseId: "CASE-1", planDigest: digest(9), lineage: lineage, source: .bound(alice), target: bob, appliedBy: "ops-ana")),
        .transferRefused(TransferRefused(caseId: "CASE-1", step: "apply", staff: "ops-ana", reason: "no approval")),
        .decisionIssued(DecisionIssued(reason: .boundToAnotherAccount, lineage: lineage, account: bob)),
        .decisionIssued(DecisionIssued(reason: .accountDeleted, lineage: nil, account: nil)),
    ]
}

@Suite struct EventCodecTests {
    @Test(arguments: Samples.events)
    func everyEventRoundTrips(event: LedgerEvent) throws {
        #expect(try EventCodec.decode(EventCodec.encode(event)) == event)
    }

    @Test(arguments: Samples.events)
    func everyTruncationOfAnEventIsAnError(event: LedgerEvent) {
        let bytes = EventCodec.encode(event)
        for length in 0..<bytes.count {
            #expect(throws: DecodingFailure.self) { try EventCodec.decode(Array(bytes.prefix(length))) }
        }
        #expect(throws: DecodingFailure.self) { try EventCodec.decode(bytes + [0]) }
    }

    @Test func everyDecisionReasonHasAStableCodeAndMessage() {
        for reason in DecisionReason.allCases {
            #expect(!reason.code.isEmpty && reason.code == reason.code.lowercased())
            #expect(!reason.message.isEmpty)
        }
        #expect(DecisionReason.boundToAnotherAccount.code == "permission-denied")
        #expect(DecisionReason.familyShared.code == "family-sharing-unsupported")
    }

    @Test func unknownTagsAreErrors() {
        #expect(throws: DecodingFailure("unknown event tag 999")) { try EventCodec.decode([0x03, 0xE7]) }
    }
}

@Suite struct ProjectionTests {
    typealias S = Samples

    @Test func bindingGrantAndTombstoneFoldToTheWholeExpectedState() {
        let state = StateProjection.fold([
            .lineageBound(lineage: S.lineage, account: S.alice),
            .entitlementGranted(EntitlementGranted(lineage: S.lineage, account: S.alice, productId: "p", expiresAt: 10)),
            .entitlementEnded(lineage: S.lineage, account: S.alice, reason: .accountDeleted),
            .lineageTombstoned(lineage: S.lineage, formerAccount: S.alice),
            .accountDeleted(account: S.alice),
        ])
        #expect(
            state
                == LedgerState(
                    lineages: [
                        S.lineage: LineageState(
                            binding: .tombstoned(formerAccount: S.alice),
                            entitlement: Entitlement(account: S.alice, productId: "p", expiresAt: 10, endedBecause: .accountDeleted))
                    ],
                    deletedAccounts: [S.alice]))
    }

    @Test func aTransferRebindsAndLeavesNoEntitlement() {
        let request = TransferRequested(plan: S.plan, planDigest: S.digest(9), requestedBy: "ops-ana", signature: [])
        let state = StateProjection.fold([
            .lineageBound(lineage: S.lineage, account: S.alice),
            .entitlementGranted(EntitlementGranted(lineage: S.lineage, account: S.alice, productId: "p", expiresAt: 10)),
            .transferRequested(request),
            .transferApplied(
                TransferApplied(caseId: "CASE-1", planDigest: S.digest(9), lineage: S.lineage, source: .bound(S.alice), target: S.bob, appliedBy: "x")
            ),
        ])
        #expect(
            state
                == LedgerState(
                    lineages: [S.lineage: LineageState(binding: .bound(S.bob), entitlement: nil)],
                    accountLineages: [S.bob: [S.lineage]],
                    transfers: ["CASE-1": TransferCase(request: request, approval: nil, applied: true)]))
    }

    @Test func readModelsRoundTripThroughTheirPersistedForm() throws {
        let state = StateProjection.fold(Samples.events)
        var loaded = LedgerState()
        try ReadModel.load(ReadModel.entries(of: state).map { ($0.key, $0.value) }, into: &loaded)
        #expect(loaded == state)
    }

    @Test func theAuditTrailKeepsDenialsDeletionsAndSupportActions() {
        var trail: [AuditEntry] = []
        for (index, event) in Samples.events.enumerated() {
            AuditTrail.evolve(
                &trail, Record(sequence: UInt64(index + 1), recordedAt: Int64(index), eventId: .zero, previousHash: .zero, hash: .zero, event: event))
        }
        #expect(
            trail.map(\.kind) == [
                "lineage-tombstoned", "account-deleted", "staff-enrolled", "staff-removed", "transfer-requested", "transfer-approved",
                "transfer-applied", "transfer-refused", "denial",
            ])
        #expect(trail.first { $0.kind == "transfer-requested" }?.reason == "lost phone")
        #expect(trail.last?.sequence == 19)
    }

    @Test func theInvariantCheckerFlagsABindingThatMovesWithoutATransfer() throws {
        var records: [Record] = []
        func add(_ event: LedgerEvent) {
            records.append(
                Record(sequence: UInt64(records.count + 1), recordedAt: 0, eventId: .zero, previousHash: .zero, hash: .zero, event: event))
        }
        add(.transactionSubmitted(TransactionSubmitted(kind: .purchase, account: S.alice, lineage: S.lineage, transaction: S.facts)))
        add(.lineageBound(lineage: S.lineage, account: S.alice))
        add(.transactionSubmitted(TransactionSubmitted(kind: .restore, account: S.bob, lineage: S.lineage, transaction: S.facts)))
        add(.lineageBound(lineage: S.lineage, account: S.bob))
        add(.entitlementGranted(EntitlementGranted(lineage: S.lineage, account: S.alice, productId: "p", expiresAt: 5)))
        var familyFacts = S.facts
        familyFacts.ownership = .familyShared
        let other = LineageKey(S.digest(0xB2))
        add(.transactionSubmitted(TransactionSubmitted(kind: .purchase, account: S.bob, lineage: other, transaction: familyFacts)))
        add(.lineageBound(lineage: other, account: S.bob))
        let violations = try InvariantChecker.check(records)
        #expect(violations.contains { $0.invariant == 1 && $0.sequence == 4 })
        #expect(violations.contains { $0.invariant == 2 && $0.sequence == 4 })
        #expect(violations.contains { $0.invariant == 3 && $0.sequence == 5 })
        #expect(violations.contains { $0.invariant == 7 && $0.sequence == 7 })
        #expect(!violations.contains { $0.sequence < 4 })
    }
}

extension LedgerEvent: CustomTestStringConvertible {
    public var testDescription: String { name }
}
