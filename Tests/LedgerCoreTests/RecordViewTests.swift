import LedgerCore
import LedgerTestSupport
import Testing

/// The view decoder a replay reads the log with (``RecordViewDecoder``) gives exactly what the full
/// decoder gives: the views of its events (or its events, when one has no view), the same product
/// ids, and the same error for bytes that do not decode, whatever the bytes.
@Suite struct RecordViewTests {
    typealias S = Samples

    /// Decodes `bytes` with the view decoder `decoder` and with the full decoder, and expects the same
    /// outcome. `names` collects the view decoder's product names by number.
    static func expectSameOutcome(_ bytes: [UInt8], _ decoder: inout RecordViewDecoder, names: inout [String]) {
        let full = Result { () throws(RecordDecodingError) -> Record in try RecordCodec.decode(bytes, sequence: 7) }
        var views: [EventView] = []
        var events: [LedgerEvent] = []
        let viewed = bytes.withUnsafeBytes { raw in
            Result { () throws(RecordDecodingError) -> RecordViewDecoder.Header in
                try decoder.decode(raw, sequence: 7, views: &views, events: &events)
            }
        }
        names += decoder.takeNewProductNames()
        switch (full, viewed) {
        case (.failure(let a), .failure(let b)):
            #expect(a == b)
            #expect(views.isEmpty && events.isEmpty, "nothing appended for bytes that do not decode")
        case (.success(let record), .success(let header)):
            #expect(header.recordedAt == record.recordedAt && header.command == record.command)
            let expected = record.events.compactMap { EventView($0, product: { _ in 0 }) }
            if expected.count == record.events.count {
                #expect(events.isEmpty)
                #expect(views.count == expected.count)
                for (view, (event, plain)) in zip(views, zip(record.events, expected)) {
                    var unnumbered = view
                    unnumbered.product = 0
                    #expect(unnumbered == plain, "\(event)")
                    #expect(view.name == event.name, "the view's name table mirrors the event's")
                    if case .entitlementGranted(let e) = event {
                        #expect(Int(view.product) < names.count && names[Int(view.product)] == e.productId)
                    }
                }
            } else {
                #expect(views.isEmpty)
                #expect(events == record.events)
            }
        default:
            Issue.record("full decoder: \(full), view decoder: \(viewed) for \(bytes)")
        }
    }

    /// Records of every kind of event, alone and after a purchase, and histories of random records
    /// (two products, family sharing, coded and written-out environments and types, expiries
    /// referenced and written out, other lineages and accounts).
    static var records: [[UInt8]] {
        var out = Samples.events.flatMap { [RecordCodec.encode(S.record([$0])), RecordCodec.encode(S.record(S.purchase + [$0]))] }
        var random = SeededGenerator(state: 24)
        func pick<T>(_ values: [T]) -> T { values[Int(random.next() % UInt64(values.count))] }
        let lineages = [S.lineage, LineageKey(S.key(0xA2))]
        let accounts = [S.alice, S.bob]
        let products = ["com.myrecipes.premium.monthly", "p.é.yearly", "p"]
        for _ in 0..<400 {
            let facts = TransactionFacts(
                transactionKey: S.key(UInt8(random.next() % 256)), productId: pick(products), purchaseDate: Int64(random.next() % 5_000) - 100,
                expiresDate: pick([nil, 9_000, -3]), revocationDate: pick([nil, 44]), ownership: pick([.purchased, .familyShared, .other("X")]),
                environment: pick(["Production", "Sandbox", "Staging"]), signedDate: 7,
                provenance: pick([.verifiedJWS, .trustedDecoded, .legacyReceipt]))
            var events: [LedgerEvent] = []
            for _ in 0..<Int(random.next() % 6) + 1 {
                let (lineage, account) = (pick(lineages), pick(accounts))
                let event: LedgerEvent =
                    switch random.next() % 13 {
                    case 0:
                        .transactionSubmitted(
                            TransactionSubmitted(kind: pick([.purchase, .renewal, .restore]), account: account, lineage: lineage, transaction: facts))
                    case 1: .transactionSubmitted(TransactionSubmitted(kind: .reconciliation, account: nil, lineage: lineage, transaction: facts))
                    case 2:
                        .notificationReceived(
                            NotificationReceived(
                                notificationType: pick(["REFUND", "NEW"]), subtype: pick([nil, "VOLUNTARY", "NEW"]), signedDate: 3,
                                lineage: pick([nil, lineage]), transaction: pick([nil, facts])))
                    case 3: .lineageBound(lineage: lineage, account: account)
                    case 4:
                        .entitlementGranted(
                            EntitlementGranted(lineage: lineage, account: account, productId: pick(products), expiresAt: pick([nil, 9_000, 5])))
                    case 5: .entitlementEnded(lineage: lineage, account: account, reason: pick([.expired, .accountDeleted, .transferred]))
                    case 6: .entitlementRevoked(lineage: lineage, account: account, revokedAt: 8)
                    case 7: .entitlementReinstated(lineage: lineage, account: account)
                    case 8: .lineageTombstoned(lineage: lineage, formerAccount: account)
                    case 9: .accountDeleted(account: account)
                    case 10: .accountDeletionRequested(account: account)
                    case 11:
                        .decisionIssued(
                            DecisionIssued(reason: pick(DecisionReason.allCases), lineage: pick([nil, lineage]), account: pick([nil, account])))
                    default: pick(S.events)
                    }
                events.append(event)
            }
            out.append(RecordCodec.encode(S.record(events, at: Int64(random.next() % 1_000))))
        }
        return out
    }

    @Test func optionalFieldsSharingStorageStayIndependent() {
        var view = EventView(kind: .decisionIssued)
        #expect(view.decision == nil && view.endReason == nil && view.time == nil && view.transaction == nil)
        view.decision = .boundToAnotherAccount
        view.endReason = nil  // clearing the other reason leaves this one
        #expect(view.decision == .boundToAnotherAccount)
        view.endReason = .transferred  // one reason at a time: the end reason replaces it
        #expect(view.endReason == .transferred && view.decision == nil)
        view.decision = nil
        #expect(view.endReason == .transferred)
        view.transaction = (familyShared: true, purchaseDate: 0)
        view.time = 0  // present, though zero
        #expect(view.transaction?.familyShared == true && view.transaction?.purchaseDate == 0 && view.time == 0)
        view.transaction = nil
        #expect(view.transaction == nil && view.time == 0)
        var expected = EventView(kind: .decisionIssued)
        expected.endReason = .transferred
        expected.time = 0
        #expect(view == expected)
    }

    @Test func viewsAreTheFullDecodersEventsForEveryRecord() {
        var decoder = RecordViewDecoder()
        var names: [String] = []
        for bytes in Self.records { Self.expectSameOutcome(bytes, &decoder, names: &names) }
        #expect(Set(names).count == names.count, "each product id numbered once")
    }

    /// Every truncation, a trailing byte, and every byte of every sample record changed in five ways:
    /// the view decoder accepts exactly what the full decoder accepts, with the same values, and fails
    /// with the same error.
    @Test func damagedBytesGiveTheFullDecodersOutcome() {
        var decoder = RecordViewDecoder()
        var names: [String] = []
        for bytes in Self.records.prefix(160) {
            for length in 0..<bytes.count { Self.expectSameOutcome(Array(bytes.prefix(length)), &decoder, names: &names) }
            Self.expectSameOutcome(bytes + [0], &decoder, names: &names)
            for index in bytes.indices {
                for mask: UInt8 in [0x01, 0x20, 0x40, 0x80, 0xFF] {
                    var damaged = bytes
                    damaged[index] ^= mask
                    Self.expectSameOutcome(damaged, &decoder, names: &names)
                }
            }
        }
    }
}
