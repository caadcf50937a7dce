import LedgerCore
import LedgerTestSupport
import Projections
import Testing

/// What `verify` and `rebuild` replay with: the packed lineage states, the lean checker and the
/// decoder that keeps a batch's events in one array give exactly what the plain types give.
@Suite struct ReplayStateTests {
    typealias S = Samples

    @Test func packedLineagesGiveBackEveryStateStored() {
        let entitlements: [Entitlement?] = [
            nil, Entitlement(account: S.alice, productId: "p", expiresAt: nil),
            Entitlement(account: S.alice, productId: "com.myrecipes.premium.monthly", expiresAt: 12, revokedAt: -5, endedBecause: .expired),
            Entitlement(account: S.bob, productId: "q", expiresAt: 0, revokedAt: nil, endedBecause: .transferred),
        ]
        let bindings: [Binding] = [.unbound, .bound(S.alice), .tombstoned(formerAccount: S.alice), .bound(S.bob)]
        var packed = PackedLineages()
        var expected: [LineageKey: LineageState] = [:]
        for (index, state) in bindings.flatMap({ binding in entitlements.map { LineageState(binding: binding, entitlement: $0) } }).enumerated() {
            let lineage = LineageKey(S.key(UInt8(index + 1)))
            packed[lineage] = state
            expected[lineage] = state
        }
        for (lineage, state) in expected { #expect(packed[lineage] == state, "\(state)") }
        #expect(packed.count == expected.count)
        #expect(packed.sortedKeys() == expected.keys.sorted())
        #expect(packed[LineageKey(S.key(0xEE))] == nil)

        // An entitlement of another account, replaced by the binding's own, then removed.
        let lineage = LineageKey(S.key(1))
        let own = LineageState(binding: .bound(S.bob), entitlement: Entitlement(account: S.bob, productId: "p", expiresAt: 3))
        packed[lineage] = LineageState(binding: .bound(S.alice), entitlement: Entitlement(account: S.bob, productId: "p", expiresAt: 3))
        packed[lineage] = own
        #expect(packed[lineage] == own)
        packed[lineage] = nil
        #expect(packed[lineage] == nil)
        #expect(packed.count == expected.count - 1)
    }

    /// Every sample event (staff, transfers, deletions, refunds, tombstones: many of them violations
    /// here) on three lineages, one record per event and as a purchase's record: alice is deleted
    /// while bound, then bound again, and deleted again.
    static var history: [Record] {
        var records: [Record] = []
        for (index, lineage) in [S.lineage, LineageKey(S.key(0xA2)), LineageKey(S.key(0xA3))].enumerated() {
            for events in [S.purchase] + S.events.map({ [$0] }) + [S.purchase] {
                let moved = events.map { event -> LedgerEvent in
                    guard index > 0 else { return event }
                    return switch event {
                    case .lineageBound(_, let account): .lineageBound(lineage: lineage, account: account)
                    case .entitlementGranted(let e):
                        .entitlementGranted(EntitlementGranted(lineage: lineage, account: e.account, productId: e.productId, expiresAt: e.expiresAt))
                    case .lineageTombstoned(_, let account): .lineageTombstoned(lineage: lineage, formerAccount: account)
                    default: event
                    }
                }
                records.append(
                    Record(
                        sequence: UInt64(records.count + 1), recordedAt: 1_700_000_000_000, at: 1_700_000_000_000, command: S.key(0xC0),
                        attempt: 0, events: moved))
            }
        }
        return records
    }

    @Test func theLeanCheckerFindsWhatTheFullOneFindsAndFoldsTheSameReadModels() throws {
        var full = InvariantChecker()
        var lean = InvariantChecker(lean: true)
        for record in Self.history {
            try full.check(record)
            try lean.check(sequence: record.sequence, events: record.events[...])
        }
        #expect(!full.violations.isEmpty)
        #expect(lean.violations == full.violations)
        #expect(lean.lineageCount == full.state.lineages.count)
        #expect(lean.state.lineages.isEmpty)
        var entries = ReadModel.Entries()
        ReadModel.OrderedEntries(lean.state, lineages: lean.leanLineages).forEach(from: []) { key, value in
            entries[key] = value
            return true
        }
        #expect(entries == ReadModel.entries(of: full.state))
    }

    /// The lean checker fed what a replay hands it (the view decoder's views, with their product
    /// numbers, and the events of records with a roster or transfer step) finds and folds exactly
    /// what it finds and folds from the records' events, over the whole key space and in two halves.
    @Test func theLeanCheckerGivesTheSameFromViews() throws {
        let half = UInt64.max / 2
        for range in [nil, 0...half, (half + 1)...UInt64.max] {
            var fromEvents = InvariantChecker(lean: true, lineageRange: range)
            var fromViews = InvariantChecker(lean: true, lineageRange: range)
            var decoder = RecordViewDecoder()
            var viewed = 0
            for record in Self.history {
                try fromEvents.check(sequence: record.sequence, events: record.events[...])
                var views: [EventView] = []
                var events: [LedgerEvent] = []
                _ = try RecordCodec.encode(record).withUnsafeBytes { raw throws(RecordDecodingError) in
                    try decoder.decode(raw, sequence: record.sequence, views: &views, events: &events)
                }
                fromViews.numberViewProducts(decoder.takeNewProductNames())
                if events.isEmpty {
                    viewed += 1
                    fromViews.check(sequence: record.sequence, views: views[...])
                } else {
                    try fromViews.check(sequence: record.sequence, events: events[...])
                }
            }
            #expect(viewed > Self.history.count / 2)
            #expect(fromViews.violations == fromEvents.violations)
            #expect(fromViews.deletionsWhileBound.map { "\($0)" } == fromEvents.deletionsWhileBound.map { "\($0)" })
            #expect(fromViews.lineageCount == fromEvents.lineageCount)
            #expect(fromViews.state == fromEvents.state)
            for lineage in fromEvents.leanLineages.sortedKeys() {
                #expect(fromViews.leanLineages.entry(lineage)?.state == fromEvents.leanLineages.entry(lineage)?.state)
                #expect(fromViews.leanLineages.entry(lineage)?.marked == fromEvents.leanLineages.entry(lineage)?.marked)
            }
        }
    }

    /// Histories of bindings, tombstones, transfers and deletions over three accounts and three
    /// lineages, mostly violating invariants 1 and 2 (rebinds without a transfer, tombstones and
    /// transfers naming an account that does not own the lineage, deleted accounts bound again and
    /// deleted again): the lean checker finds exactly the full checker's violations, and so do two
    /// lean checkers of half the key space each once their invariant-1 counts are added up.
    @Test func theLeanCheckerCountsBoundLineagesAsTheFullCheckerDoes() throws {
        var random = SeededGenerator(state: 9)
        let accounts = [S.alice, S.bob, S.account(0x0C)]
        // Two lineages in the lower half of the key space, one in the upper.
        let lineages = [LineageKey(S.key(0x10)), LineageKey(S.key(0x20)), S.lineage]
        let half = UInt64.max / 2
        var ones = 0
        for _ in 0..<300 {
            var full = InvariantChecker()
            var lean = InvariantChecker(lean: true)
            var halves = [InvariantChecker(lean: true, lineageRange: 0...half), InvariantChecker(lean: true, lineageRange: (half + 1)...UInt64.max)]
            for sequence in UInt64(1)...40 {
                let account = accounts[Int(random.next() % 3)]
                let other = accounts[Int(random.next() % 3)]
                let lineage = lineages[Int(random.next() % 3)]
                let event: LedgerEvent =
                    switch random.next() % 6 {
                    case 0, 1: .lineageBound(lineage: lineage, account: account)
                    case 2: .lineageTombstoned(lineage: lineage, formerAccount: account)
                    case 3:
                        .transferApplied(
                            TransferApplied(
                                caseId: "C\(sequence)", planDigest: S.digest(9), lineage: lineage,
                                source: random.next() % 2 == 0 ? .bound(account) : .tombstoned(account), target: other, appliedBy: "ops"))
                    case 4: .accountDeleted(account: account)
                    default: .entitlementGranted(EntitlementGranted(lineage: lineage, account: account, productId: "p", expiresAt: nil))
                    }
                try full.check(sequence: sequence, events: [event])
                try lean.check(sequence: sequence, events: [event])
                for index in halves.indices { try halves[index].check(sequence: sequence, events: [event]) }
            }
            #expect(lean.violations == full.violations)
            #expect(lean.boundAccounts == full.boundAccounts)
            var added: [String: (sequence: UInt64, account: AccountID, bound: Int)] = [:]
            for deletion in halves.flatMap(\.deletionsWhileBound) {
                added["\(deletion.sequence) \(deletion.account)", default: (deletion.sequence, deletion.account, 0)].bound += deletion.bound
            }
            let fromHalves = added.values.sorted { $0.sequence < $1.sequence }.map {
                InvariantViolation(invariant: 1, sequence: $0.sequence, message: InvariantChecker.deletedWhileBound($0.account, $0.bound))
            }
            #expect(fromHalves == full.violations.filter { $0.invariant == 1 && $0.message.contains("deleted while") })
            ones += fromHalves.count
        }
        #expect(ones > 300, "the histories delete accounts while bound")
    }

    @Test func aRecordDecoderGivesEveryRecordWithItsEventsInOneArray() throws {
        let decoder = RecordDecoder()
        var events: [LedgerEvent] = []
        for (index, record) in Self.history.enumerated() {
            // The same records whether or not it forgot the product ids decoded before (a replay's batches).
            if index % 3 == 2 { decoder.forgetStrings() }
            let bytes = RecordCodec.encode(record)
            let start = events.count
            var decoded = try bytes.withUnsafeBytes { try decoder.decode($0, sequence: record.sequence, appendingEventsTo: &events) }
            #expect(decoded.events.isEmpty)
            decoded.events = Array(events[start...])
            #expect(decoded == record)
        }

        // Bytes that do not decode append nothing and fail as RecordCodec's decoding does.
        let count = events.count
        let damaged = Array(RecordCodec.encode(S.record(S.purchase)).dropLast())
        var expected: RecordDecodingError?
        do { _ = try RecordCodec.decode(damaged, sequence: 7) } catch { expected = error }
        #expect(expected != nil)
        do {
            _ = try damaged.withUnsafeBytes { try decoder.decode($0, sequence: 7, appendingEventsTo: &events) }
            Issue.record("damaged bytes decoded")
        } catch {
            #expect(error as? RecordDecodingError == expected)
        }
        #expect(events.count == count)
    }
}
