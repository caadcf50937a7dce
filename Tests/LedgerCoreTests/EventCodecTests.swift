import LedgerCore
import Projections
import Testing

/// One sample of every event case: the catalogue is the storage format.
enum Samples {
    static func digest(_ byte: UInt8) -> Digest32 { Digest32([UInt8](repeating: byte, count: 32)) ?? .zero }
    static func key(_ byte: UInt8) -> Key128 { Key128([UInt8](repeating: byte, count: 16)) ?? .zero }
    static let lineage = LineageKey(key(0xA1))
    static let alice = account(0x0A)
    static let bob = account(0x0B)

    static func account(_ byte: UInt8) -> AccountID { AccountID(key(byte)) }
    static let facts = TransactionFacts(
        transactionKey: key(0x7E), productId: "com.myrecipes.premium.monthly", purchaseDate: 1_000, expiresDate: 2_000,
        revocationDate: nil, ownership: .purchased, environment: "Sandbox", signedDate: 1_000, provenance: .verifiedJWS)
    static let plan = TransferPlan(
        caseId: "CASE-1", lineage: lineage, source: .tombstoned(alice), target: bob, lineageVersion: 9,
        targetAuthentication: "reauth", ownershipEvidence: "order MQ1", reason: "lost phone")

    static var upgraded: TransactionFacts {
        var upgraded = facts
        upgraded.isUpgraded = true
        upgraded.revocationDate = 1_500
        return upgraded
    }

    static let events: [LedgerEvent] = [
        .transactionSubmitted(TransactionSubmitted(kind: .restore, account: alice, lineage: lineage, transaction: facts)),
        .transactionSubmitted(TransactionSubmitted(kind: .reconciliation, account: nil, lineage: lineage, transaction: facts)),
        .notificationReceived(
            NotificationReceived(notificationType: "DID_RENEW", subtype: "BILLING_RECOVERY", signedDate: 5, lineage: lineage, transaction: facts)),
        .notificationReceived(NotificationReceived(notificationType: "TEST", subtype: nil, signedDate: 6, lineage: nil, transaction: nil)),
        .notificationReceived(
            NotificationReceived(notificationType: "NEW_TYPE", subtype: "NEW_SUBTYPE", signedDate: -6, lineage: nil, transaction: nil)),
        .transactionSubmitted(
            TransactionSubmitted(
                kind: .purchase, account: alice, lineage: lineage,
                transaction: TransactionFacts(
                    transactionKey: key(0x7F), productId: "p", purchaseDate: -5, expiresDate: nil, revocationDate: 9,
                    ownership: .other("FUTURE"), environment: "Staging", signedDate: 4_000_000_000_000, provenance: .legacyReceipt))),
        .accountDeletionRequested(account: alice),
        .lineageBound(lineage: lineage, account: alice),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: "p", expiresAt: nil)),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: "p", expiresAt: 12)),
        .entitlementEnded(lineage: lineage, account: alice, reason: .transferred),
        .entitlementRevoked(lineage: lineage, account: alice, revokedAt: 77),
        .entitlementReinstated(lineage: lineage, account: alice),
        .lineageTombstoned(lineage: lineage, formerAccount: alice),
        .accountDeleted(account: alice),
        .staffEnrolled(
            StaffEnrolled(
                staff: "ops-ana", roles: [.operator_, .approver], publicKey: [UInt8](repeating: 5, count: 32), ownAccount: bob,
                enrolledBy: "admin", signature: [UInt8](repeating: 6, count: 64))),
        .staffEnrolled(StaffEnrolled(staff: "root", roles: .administrator, publicKey: [7], ownAccount: nil, enrolledBy: nil, signature: [])),
        .staffRemoved(StaffRemoved(staff: "ops-ana", removedBy: "admin", signature: [1, 2, 3])),
        .staffEnrolled(
            StaffEnrolled(
                staff: "ops-cy", roles: .operator_, publicKey: [8], ownAccount: nil, enrolledBy: "admin", signature: [9], signedAfter: 300,
                coSignedBy: "admin-2", coSignature: [10, 11])),
        .staffRemoved(StaffRemoved(staff: "ops-cy", removedBy: "admin", signature: [1], signedAfter: 0, coSignedBy: "admin-2", coSignature: [2])),
        .rosterChangeProposed(.remove(StaffRemoved(staff: "ops-ana", removedBy: "admin", signature: [3], signedAfter: 1 << 40))),
        .rosterChangeProposed(
            .enroll(
                StaffEnrolled(staff: "ops-di", roles: .approver, publicKey: [4], ownAccount: bob, enrolledBy: "admin", signature: [5], signedAfter: 2)
            )
        ),
        .transferRequested(TransferRequested(plan: plan, planDigest: digest(9), requestedBy: "ops-ana", signature: [4])),
        .transferApproved(TransferApproved(caseId: "CASE-1", planDigest: digest(9), approvedBy: "ops-ben", signature: [5])),
        .transferApplied(
            TransferApplied(caseId: "CASE-1", planDigest: digest(9), lineage: lineage, source: .bound(alice), target: bob, appliedBy: "ops-ana")),
        .transferApplied(
            TransferApplied(
                caseId: "CASE-2", planDigest: digest(9), lineage: lineage, source: .tombstoned(alice), target: bob, appliedBy: "ops-ana",
                signature: [UInt8](repeating: 3, count: 64))),
        .transferRefused(TransferRefused(caseId: "CASE-1", step: "apply", staff: "ops-ana", reason: "no approval")),
        .transferRefused(TransferRefused(caseId: "CASE-1", step: "request", staff: "ops-ana", reason: "not enrolled", lineage: lineage)),
        .decisionIssued(DecisionIssued(reason: .boundToAnotherAccount, lineage: lineage, account: bob)),
        .decisionIssued(DecisionIssued(reason: .accountDeleted, lineage: nil, account: nil)),
        .storeUpgraded(StoreUpgraded(fromFormat: 1, records: 54, headHash: digest(0x33), merkleRoot: digest(0x44), copiedRecords: 17)),
        // Storage format 2's later bits: an upgraded transaction, a grant's purchase date.
        .transactionSubmitted(TransactionSubmitted(kind: .renewal, account: alice, lineage: lineage, transaction: upgraded)),
        .transactionSubmitted(TransactionSubmitted(kind: .reconciliation, account: nil, lineage: lineage, transaction: upgraded)),
        .notificationReceived(
            NotificationReceived(notificationType: "REFUND", subtype: nil, signedDate: 5, lineage: lineage, transaction: upgraded)),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: "p", expiresAt: 2_000, purchasedAt: 1_000)),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: "p", expiresAt: 12, purchasedAt: -7)),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: "p", expiresAt: nil, purchasedAt: 3)),
    ]

    /// A record holding `events` (sequence 7).
    static func record(_ events: [LedgerEvent], at: Timestamp = 1_700_000_000_000) -> Record {
        Record(sequence: 7, recordedAt: 1_700_000_000_123, at: at, command: key(0xC0), attempt: 2, events: events)
    }

    /// A purchase as the decider records it: fact, binding, grant, decision.
    static let purchase: [LedgerEvent] = [
        .transactionSubmitted(TransactionSubmitted(kind: .purchase, account: alice, lineage: lineage, transaction: facts)),
        .lineageBound(lineage: lineage, account: alice),
        .entitlementGranted(EntitlementGranted(lineage: lineage, account: alice, productId: facts.productId, expiresAt: facts.expiresDate)),
        .decisionIssued(DecisionIssued(reason: .bound, lineage: lineage, account: alice)),
    ]
}

@Suite struct EventCodecTests {
    typealias S = Samples

    @Test(arguments: Samples.events)
    func everyEventRoundTripsAloneAndAfterAFact(event: LedgerEvent) throws {
        for events in [[event], S.purchase + [event]] {
            let record = S.record(events)
            #expect(try RecordCodec.decode(RecordCodec.encode(record), sequence: 7) == record)
        }
    }

    @Test(arguments: Samples.events)
    func everyTruncationOfARecordIsAnError(event: LedgerEvent) {
        let bytes = RecordCodec.encode(S.record([event]))
        for length in 0..<bytes.count {
            #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(Array(bytes.prefix(length)), sequence: 7) }
        }
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(bytes + [0], sequence: 7) }
    }

    /// Damaged bytes that nest roster-change proposals without end are refused, not decoded until the
    /// stack overflows (found by RecordDecoderFuzzer).
    @Test func nestedRosterChangeProposalsAreRefusedNotRecursed() {
        let bytes = [UInt8](repeating: 19, count: 200_000)  // the roster-change-proposed tag, over and over
        bytes.withUnsafeBytes { buffer in
            var reader = ByteReader(buffer)
            #expect(throws: DecodingFailure.self) { _ = try EventCodec.decode(from: &reader, at: 0) }
        }
    }

    /// The effects and decision of a purchase repeat its lineage, account, product and expiry as
    /// back-references: they add a few bytes, not 16 per key and ~30 per product.
    @Test func effectsReferToTheFactInsteadOfRepeatingIt() {
        let fact = RecordCodec.encode(S.record([S.purchase[0]])).count
        let whole = RecordCodec.encode(S.record(S.purchase)).count
        #expect(whole - fact == 5, "binding 1 byte, grant 2 (head and flags), decision 2 (head and reason)")
    }

    /// A record's header (format, sequence 1, a command key, times 0) before the events a test writes.
    static var recordHeader: [UInt8] {
        var w = ByteWriter()
        w.u8(RecordCodec.formatVersion)
        w.u48(1)
        w.key(S.key(0xC0))
        w.zigzag(0)
        w.varint(0)
        return w.output
    }

    /// A value written out where the format has a back-reference (or a code) has a second encoding:
    /// refused, so every record has exactly one.
    @Test func nonCanonicalEncodingsAreRefused() throws {
        let header = Self.recordHeader
        // The fact, then a binding that writes the fact's lineage and account out.
        var fact = ByteWriter()
        EventCodec.encode([S.purchase[0]], at: 1, into: &fact)
        var inline = ByteWriter()
        inline.u8(4)
        inline.key(S.lineage.key)
        inline.key(S.alice.key)
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(header + fact.output + inline.output, sequence: 1) }
        // A known notification type written as a string; an overlong varint.
        var named = ByteWriter()
        named.u8(2)
        named.u8(0)
        named.varint(0)
        named.shortString("DID_RENEW")
        named.zigzag(0)
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(header + named.output, sequence: 1) }
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(Array(header.dropLast()) + [0x80, 0x00] + fact.output, sequence: 1) }
        // A back-reference before anything was named.
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(header + [4 | 0x20 | 0x40], sequence: 1) }
    }

    /// A grant's purchase date has one encoding: a back-reference when it is the fact's, else written
    /// out; and the upgrade bit of a notification needs a transaction.
    @Test func aGrantsPurchaseDateAndTheUpgradeBitAreCanonical() throws {
        let header = Self.recordHeader
        var fact = ByteWriter()
        EventCodec.encode([S.purchase[0]], at: 1, into: &fact)
        let head: UInt8 = 5 | 0x20 | 0x40 | 0x80
        // The fact's purchase date written out.
        var writtenOut = ByteWriter()
        writtenOut.u8(head)
        writtenOut.u8(1 | 2 | 8)
        writtenOut.zigzag(S.facts.purchaseDate - 1)
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(header + fact.output + writtenOut.output, sequence: 1) }
        // Both purchase bits.
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(header + fact.output + [head, 1 | 2 | 4 | 8, 0], sequence: 1) }
        // A back-reference without a transaction.
        #expect(throws: RecordDecodingError.self) {
            try RecordCodec.decode(header + [5, 4] + S.lineage.key.bytes + S.alice.key.bytes + [1, 0x70], sequence: 1)
        }
        // The back-reference decodes to the fact's purchase date.
        let record = S.record([
            S.purchase[0],
            .entitlementGranted(
                EntitlementGranted(
                    lineage: S.lineage, account: S.alice, productId: S.facts.productId, expiresAt: S.facts.expiresDate,
                    purchasedAt: S.facts.purchaseDate)),
        ])
        let bytes = RecordCodec.encode(record)
        #expect(bytes.count == RecordCodec.encode(S.record(S.purchase.prefix(1) + [S.purchase[2]])).count, "no bytes for the purchase date")
        #expect(try RecordCodec.decode(bytes, sequence: 7) == record)
        // The upgrade bit of a notification without a transaction.
        var named = ByteWriter()
        named.u8(2)
        named.u8(8)
        named.varint(17)
        named.zigzag(0)
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(header + named.output, sequence: 1) }
    }

    @Test func everyDecisionReasonHasAStableCodeAndMessage() {
        for reason in DecisionReason.allCases {
            #expect(!reason.code.isEmpty && reason.code == reason.code.lowercased())
            #expect(!reason.message.isEmpty)
            #expect(reason.rawValue < 64, "the record codec keeps a reason in 6 bits")
        }
        #expect(DecisionReason.boundToAnotherAccount.code == "permission-denied")
        #expect(DecisionReason.familyShared.code == "family-sharing-unsupported")
    }

    @Test func unknownTagsAreErrors() {
        let bytes = RecordCodec.encode(S.record([.accountDeleted(account: S.alice)]))
        var unknown = bytes
        unknown[bytes.count - 17] = 0x1F  // the event's head byte, before the account's 16
        #expect(throws: RecordDecodingError(sequence: 7, reason: "unknown event tag 31")) { try RecordCodec.decode(unknown, sequence: 7) }
    }

    /// Plans signed in format 1 keep format 1's canonical bytes (a 32-byte lineage key), so their
    /// signed digest still verifies after an upgrade; new plans use format 2's.
    @Test func planDigestsCoverTheFormatTheyWereSignedIn() {
        var old = S.plan
        old.formatOneLineageSuffix = S.key(0xEE)
        #expect(String(decoding: old.canonicalBytes.dropFirst(4).prefix(33), as: UTF8.self) == "ownership-ledger/transfer-plan/v1")
        #expect(String(decoding: S.plan.canonicalBytes.dropFirst(4).prefix(33), as: UTF8.self) == "ownership-ledger/transfer-plan/v2")
        #expect(old.canonicalBytes.count == S.plan.canonicalBytes.count + 16)
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

    /// The previous entitlement stays, ended `transferred` (with any refund on it), and the
    /// target has none until it restores.
    @Test func aTransferRebindsAndKeepsThePreviousEntitlementEnded() {
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
                    lineages: [
                        S.lineage: LineageState(
                            binding: .bound(S.bob),
                            entitlement: Entitlement(account: S.alice, productId: "p", expiresAt: 10, endedBecause: .transferred))
                    ],
                    accountLineages: [S.bob: [S.lineage]],
                    transfers: ["CASE-1": TransferCase(request: request, approval: nil, applied: true)]))
        #expect(state.lineage(S.lineage).awaitsRestore)
        #expect(state.lineage(S.lineage).visibleEntitlement == nil)
    }

    /// `changesNothing` (a retry's test, which copies only what the events touch) answers as folding
    /// into the whole state and comparing does: every sample event and every pair of them, on every
    /// state the samples pass through.
    @Test func changesNothingAgreesWithFoldingTheWholeState() {
        var states = [LedgerState()]
        for event in Samples.events { states.append(StateProjection.fold([event], into: states[states.count - 1])) }
        var disagreements: [String] = []
        var answers: Set<Bool> = []
        for (index, state) in states.enumerated() {
            for first in Samples.events {
                for events in [[first]] + Samples.events.map({ [first, $0] }) {
                    let expected = StateProjection.fold(events, into: state) == state
                    answers.insert(expected)
                    if StateProjection.changesNothing(events, in: state) != expected { disagreements.append("state \(index): \(events)") }
                }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(3))")
        #expect(answers == [true, false])
    }

    @Test func readModelsRoundTripThroughTheirPersistedForm() throws {
        let state = StateProjection.fold(Samples.events)
        var loaded = LedgerState()
        try ReadModel.load(ReadModel.entries(of: state).map { ($0.key, $0.value) }, into: &loaded)
        // An account's bound lineages are not a read model: the account-lineages index keeps them.
        var persisted = state
        persisted.accountLineages = [:]
        #expect(loaded == persisted)
    }

    @Test func theAuditTrailKeepsDenialsDeletionsAndSupportActions() {
        var trail: [AuditEntry] = []
        for (index, event) in Samples.events.enumerated() {
            AuditTrail.evolve(
                &trail, Record(sequence: UInt64(index + 1), recordedAt: Int64(index), at: 0, command: .zero, attempt: 0, events: [event]))
        }
        #expect(
            trail.map(\.kind) == [
                "lineage-tombstoned", "account-deleted", "staff-enrolled", "staff-enrolled", "staff-removed", "staff-enrolled",
                "staff-removed", "roster-change-proposed", "roster-change-proposed", "transfer-requested", "transfer-approved",
                "transfer-applied", "transfer-applied", "transfer-refused", "transfer-refused", "denial",
            ])
        #expect(trail.first { $0.kind == "transfer-requested" }?.reason == "lost phone")
        #expect(trail.first { $0.kind == "staff-removed" && $0.staff == "ops-cy" }?.reason == "removed by admin, co-signed by admin-2")
        #expect(trail.last { $0.kind == "transfer-refused" }?.lineage == Samples.lineage)
        #expect(trail.last?.sequence == 29)
    }

    @Test func theInvariantCheckerFlagsABindingThatMovesWithoutATransfer() throws {
        var records: [Record] = []
        func add(_ events: LedgerEvent...) {
            records.append(Record(sequence: UInt64(records.count + 1), recordedAt: 0, at: 0, command: .zero, attempt: 0, events: events))
        }
        add(
            .transactionSubmitted(TransactionSubmitted(kind: .purchase, account: S.alice, lineage: S.lineage, transaction: S.facts)),
            .lineageBound(lineage: S.lineage, account: S.alice))
        add(
            .transactionSubmitted(TransactionSubmitted(kind: .restore, account: S.bob, lineage: S.lineage, transaction: S.facts)),
            .lineageBound(lineage: S.lineage, account: S.bob))
        add(
            .transactionSubmitted(TransactionSubmitted(kind: .renewal, account: S.alice, lineage: S.lineage, transaction: S.facts)),
            .entitlementGranted(EntitlementGranted(lineage: S.lineage, account: S.alice, productId: "p", expiresAt: 5)))
        var familyFacts = S.facts
        familyFacts.ownership = .familyShared
        let other = LineageKey(S.key(0xB2))
        add(
            .transactionSubmitted(TransactionSubmitted(kind: .purchase, account: S.bob, lineage: other, transaction: familyFacts)),
            .lineageBound(lineage: other, account: S.bob))
        let violations = try InvariantChecker.check(records)
        #expect(violations.contains { $0.invariant == 1 && $0.sequence == 2 })
        #expect(violations.contains { $0.invariant == 2 && $0.sequence == 2 })
        #expect(violations.contains { $0.invariant == 3 && $0.sequence == 3 })
        #expect(violations.contains { $0.invariant == 7 && $0.sequence == 4 })
        #expect(!violations.contains { $0.sequence < 2 })
    }
}

extension LedgerEvent: CustomTestStringConvertible {
    public var testDescription: String { name }
}
