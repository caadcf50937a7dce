import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

@Suite struct LedgerTimeTests {
    @Test(arguments: [
        ("1970-01-01T00:00:00Z", Int64(0)),
        ("2026-11-29T12:00:00Z", 1_795_953_600_000),
        ("2026-11-29T12:00:00.25Z", 1_795_953_600_250),
        ("2026-11-29T12:00:00.1234Z", 1_795_953_600_123),
        ("2026-11-29T12:00:00.123456+00:00", 1_795_953_600_123),
        ("2026-11-29T12:00:00.123456789Z", 1_795_953_600_123),
        ("2026-11-29T13:30:00+01:30", 1_795_953_600_000),
        ("2026-11-29T10:00:00-02:00", 1_795_953_600_000),
        ("2024-02-29T23:59:59.999Z", 1_709_251_199_999),
        ("1795953600000", 1_795_953_600_000),
        ("0", Int64(0)),
        ("2016-12-31T23:59:60Z", 1_483_228_800_000),
        ("2017-01-01T00:59:60+01:00", 1_483_228_800_000),
    ])
    func parses(text: String, expected: Int64) {
        #expect(LedgerTime.parse(text) == expected)
    }

    @Test(arguments: [
        "", "yesterday", "2026-11-29", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-29T12:00:00", "2026-11-29T25:00:00Z",
        "2026-11-29T12:00:00.Z", "2026-11-29T12:00:00Zjunk", "1969-12-31T23:59:59.999Z", "-1", "253402300800000",
        // Milliseconds are digits only; a leap second only at 23:59:60 UTC.
        " 5", "5 ", "+5", "05", "2026-11-29T00:00:60Z", "2026-11-29T23:59:60+01:00",
    ])
    func rejects(text: String) {
        #expect(LedgerTime.parse(text) == nil)
    }

    @Test func formatsAndParsesBackAcrossCenturiesAgreeingWithFoundation() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var random = SeededGenerator(state: 7)
        for _ in 0..<2_000 {
            let time = Int64.random(in: LedgerTime.supportedRange, using: &random)
            let text = LedgerTime.format(time)
            #expect(LedgerTime.parse(text) == time)
            #expect(text == formatter.string(from: Date(timeIntervalSince1970: Double(time) / 1000)), "\(time)")
        }
    }
}
