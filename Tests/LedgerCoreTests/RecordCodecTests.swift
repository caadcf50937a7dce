import LedgerCore
import Testing

@Suite struct RecordCodecTests {
    static let lineage = LineageKey(Digest32([UInt8](repeating: 0xAB, count: 32)) ?? .zero)
    static let account = AccountID([UInt8](repeating: 0x11, count: 16))

    static func record() throws -> Record {
        let account = try #require(account)
        let body = RecordCodec.body(
            sequence: 7, recordedAt: 1_700_000_000_123, eventId: Digest32([UInt8](repeating: 0xEE, count: 32)) ?? .zero,
            previousHash: Digest32([UInt8](repeating: 0x22, count: 32)) ?? .zero,
            eventBytes: EventCodec.encode(.lineageBound(lineage: lineage, account: account)))
        return try RecordCodec.decode(body + [UInt8](repeating: 0x33, count: 32), sequence: 7)
    }

    /// Pins the record format: any change to these bytes is a storage-format change.
    @Test func goldenBytes() throws {
        let account = try #require(Self.account)
        let body = RecordCodec.body(
            sequence: 7, recordedAt: 1_700_000_000_123, eventId: Digest32([UInt8](repeating: 0xEE, count: 32)) ?? .zero,
            previousHash: Digest32([UInt8](repeating: 0x22, count: 32)) ?? .zero,
            eventBytes: EventCodec.encode(.lineageBound(lineage: Self.lineage, account: account)))
        let expected =
            "01" + "0000000000000007" + "0000018bcfe5687b" + String(repeating: "ee", count: 32) + "0001"
            + String(repeating: "22", count: 32) + "00000032" + "000a" + String(repeating: "ab", count: 32)
            + String(repeating: "11", count: 16)
        #expect(body.hex == expected)
    }

    @Test func roundTripsEveryField() throws {
        let record = try Self.record()
        #expect(record.sequence == 7)
        #expect(record.recordedAt == 1_700_000_000_123)
        #expect(record.schemaVersion == 1)
        #expect(record.hash == Digest32([UInt8](repeating: 0x33, count: 32)))
        #expect(record.event == .lineageBound(lineage: Self.lineage, account: try #require(Self.account)))
    }

    @Test(arguments: [0, 1, 10, 50, 100, 150, 157])
    func aTruncatedRecordIsAnErrorNamingItsSequence(length: Int) throws {
        let account = try #require(Self.account)
        let stored =
            RecordCodec.body(
                sequence: 9, recordedAt: 1, eventId: .zero, previousHash: .zero,
                eventBytes: EventCodec.encode(.lineageBound(lineage: Self.lineage, account: account))) + [UInt8](repeating: 0, count: 32)
        #expect(length < stored.count)
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode(Array(stored.prefix(length)), sequence: 9) }
        do {
            _ = try RecordCodec.decode(Array(stored.prefix(length)), sequence: 9)
        } catch {
            #expect(error.sequence == 9)
            #expect(error.description.contains("record 9"))
        }
    }

    @Test func everySingleByteCorruptionOfTheEnvelopeOrEventIsCaughtOrDecodes() throws {
        // Decoding never traps: each corrupted variant either decodes or throws.
        let account = try #require(Self.account)
        let stored =
            RecordCodec.body(
                sequence: 3, recordedAt: 1, eventId: .zero, previousHash: .zero,
                eventBytes: EventCodec.encode(.lineageBound(lineage: Self.lineage, account: account))) + [UInt8](repeating: 0, count: 32)
        var failures = 0
        for index in stored.indices {
            var corrupted = stored
            corrupted[index] ^= 0xFF
            if (try? RecordCodec.decode(corrupted, sequence: 3)) == nil { failures += 1 }
        }
        #expect(failures > 10)
    }
}
