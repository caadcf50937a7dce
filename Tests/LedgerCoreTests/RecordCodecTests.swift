import LedgerCore
import Testing

@Suite struct RecordCodecTests {
    typealias S = Samples

    /// Pins the record format: any change to these bytes is a storage-format change.
    @Test func goldenBytes() throws {
        let record = Record(
            sequence: 7, recordedAt: 1_700_000_000_123, at: 1_700_000_000_000, command: S.key(0xC0), attempt: 1,
            events: [.lineageBound(lineage: S.lineage, account: S.alice), .accountDeleted(account: S.alice)])
        let expected =
            "02" + "018bcfe5687b" + String(repeating: "c0", count: 16) + "f501" + "01" + "04" + String(repeating: "a1", count: 16)
            + String(repeating: "0a", count: 16) + "4a"
        #expect(RecordCodec.encode(record).hex == expected)
        #expect(try RecordCodec.decode(RecordCodec.encode(record), sequence: 7) == record)
    }

    @Test func theTimeAndCommandAreReadAtFixedOffsetsWithoutDecoding() {
        let bytes = RecordCodec.encode(S.record(S.purchase))
        bytes.withUnsafeBytes { raw in
            #expect(RecordCodec.recordedAt(of: raw) == 1_700_000_000_123)
            #expect(RecordCodec.command(of: raw) == S.key(0xC0))
        }
    }

    @Test(arguments: [0, 1, 10, 22, 23, 30, 60])
    func aTruncatedRecordIsAnErrorNamingItsSequence(length: Int) throws {
        let stored = RecordCodec.encode(S.record(S.purchase))
        #expect(length < stored.count)
        do {
            _ = try RecordCodec.decode(Array(stored.prefix(length)), sequence: 9)
            Issue.record("decoded \(length) bytes")
        } catch {
            #expect(error.sequence == 9)
            #expect(error.description.contains("record 9"))
        }
    }

    @Test func everySingleByteCorruptionIsCaughtOrDecodesNeverTraps() throws {
        let stored = RecordCodec.encode(S.record(S.purchase))
        var failures = 0
        for index in stored.indices {
            var corrupted = stored
            corrupted[index] ^= 0xFF
            if (try? RecordCodec.decode(corrupted, sequence: 3)) == nil { failures += 1 }
        }
        #expect(failures > stored.count / 4)
    }

    @Test func aFormatOneRecordIsRefusedNamingTheUpgrade() {
        #expect(throws: RecordDecodingError.self) { try RecordCodec.decode([1] + [UInt8](repeating: 0, count: 40), sequence: 1) }
        do {
            _ = try RecordCodec.decode([1] + [UInt8](repeating: 0, count: 40), sequence: 1)
        } catch {
            #expect(error.reason.contains("upgrade"))
        }
    }
}

/// Format 1, kept read-only for upgrades and old dispute bundles.
@Suite struct FormatOneTests {
    typealias S = Samples

    /// The format-1 golden record (`lineageBound`, 32-byte lineage): its keys decode to their first
    /// 16 bytes, the rest kept aside.
    @Test func aFormatOneRecordDecodesWithItsWideKeys() throws {
        let hex =
            "01" + "0000000000000007" + "0000018bcfe5687b" + String(repeating: "ee", count: 32) + "0001" + String(repeating: "22", count: 32)
            + "00000032" + "000a" + String(repeating: "ab", count: 16) + String(repeating: "cd", count: 16)
            + String(repeating: "11", count: 16) + String(repeating: "33", count: 32)
        let bytes = try #require([UInt8](hex: hex))
        let record = try FormatOne.decode(bytes, sequence: 7)
        #expect(record.event == .lineageBound(lineage: LineageKey(S.key(0xAB)), account: S.account(0x11)))
        #expect(record.wide.lineageSuffix == S.key(0xCD))
        #expect(record.recordedAt == 1_700_000_000_123)
        #expect(record.hash == S.digest(0x33))
        #expect(throws: RecordDecodingError.self) { try FormatOne.decode(bytes, sequence: 8) }
        #expect(throws: RecordDecodingError.self) { try FormatOne.decode(Array(bytes.dropLast(40)), sequence: 7) }
    }

    /// Format-1 records are grouped into the commands that produced them.
    @Test func batchesGroupEachCommandsEvents() {
        func record(_ sequence: UInt64, _ event: LedgerEvent) -> FormatOne.Record {
            FormatOne.Record(
                sequence: sequence, recordedAt: 0, eventId: .zero, schemaVersion: 1, previousHash: .zero, hash: .zero, event: event,
                wide: FormatOne.WideKeys())
        }
        let approve = LedgerEvent.transferApproved(TransferApproved(caseId: "C", planDigest: .zero, approvedBy: "b", signature: []))
        let apply = LedgerEvent.transferApplied(
            TransferApplied(caseId: "C", planDigest: .zero, lineage: S.lineage, source: .bound(S.alice), target: S.bob, appliedBy: "a"))
        let events: [LedgerEvent] =
            S.purchase + [approve, .entitlementEnded(lineage: S.lineage, account: S.alice, reason: .transferred), apply, apply] + S.purchase
        let batches = FormatOne.batches(events.enumerated().map { record(UInt64($0.offset + 1), $0.element) })
        #expect(batches.map { $0.map(\.sequence) } == [[1, 2, 3, 4], [5], [6, 7], [8], [9, 10, 11, 12]])
    }
}
