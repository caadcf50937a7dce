import LedgerCore
import StrictJSON
import Testing

@testable import OwnershipLedger

/// A line decided once is answered by writing its JSON straight into bytes (`SubmitProtocol.Answer`):
/// it must be byte for byte what rendering the decision's object gives, for every decision.
@Suite struct AnswerRenderingTests {
    @Test func anAnswerWrittenDirectlyIsTheRenderedObjectByteForByte() {
        let granted = EntitlementGranted(
            lineage: LineageKey(Key128(high: 1, low: 2)), account: AccountID(Key128(high: 3, low: 4)),
            productId: "com.example.premium", expiresAt: 1_796_083_200_000)
        var ended = EntitlementView(granted: granted, at: 1_800_000_000_000)
        ended.revoked = true
        ended.endedBecause = "refunded"
        var escaped = EntitlementView(granted: granted, at: 0)
        escaped.productId = "a \"quoted\"\\ product\n\u{1}é"
        escaped.expiresAt = nil
        let entitlements: [EntitlementView?] = [nil, EntitlementView(granted: granted, at: 0), ended, escaped]
        let ids: [JSONValue?] = [nil, .string("line \"7\""), .integer(-9_223_372_036_854_775_808)]
        var compared = 0
        for reason in DecisionReason.allCases {
            for sequence in [nil, 42] as [UInt64?] {
                for entitlement in entitlements {
                    for duplicate in [false, true] {
                        let decision = Decision(reason: reason, sequence: sequence, entitlement: entitlement, duplicate: duplicate)
                        for billing in [false, true] {
                            for id in ids {
                                var object = render(decision)
                                if billing { object["appleBillingContinues"] = true }
                                let expected = SubmitProtocol.Answer(object, id: id)
                                let written = SubmitProtocol.Answer(decision, appleBillingContinues: billing, id: id)
                                #expect(written.line == expected.line)
                                #expect(written.decision == expected.decision && written.code == expected.code)
                                #expect(written.message == expected.message)
                                compared += 1
                            }
                        }
                    }
                }
            }
        }
        #expect(compared == DecisionReason.allCases.count * 2 * 4 * 2 * 2 * 3)
    }
}
