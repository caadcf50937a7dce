// libFuzzer harness for the record decoders: any byte string must decode or throw, never trap.
// Format 2 (the log's records, and those dispute bundles carry) is canonical: a record that decodes
// re-encodes to exactly the bytes it came from. Format 1 (old dispute bundles, upgrades) must decode
// or throw too. The view decoder a replay reads the log with gives the full decoder's outcome: the same
// error, or the views of the same events (the events themselves when one has no view). Built and run
// by `make fuzz` (Tests/Fuzz/fuzz.sh).
import LedgerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRecordDecoder(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    if let record = try? RecordCodec.decode(bytes, sequence: 1) {
        expect(RecordCodec.encode(record) == bytes, "a decoded record does not re-encode to its bytes")
        bytes.withUnsafeBytes { raw in
            expect(RecordCodec.recordedAt(of: raw) == record.recordedAt, "recordedAt read in place differs")
            expect(RecordCodec.command(of: raw) == record.command, "the command key read in place differs")
        }
    }
    var decoder = RecordViewDecoder()
    var views: [EventView] = []
    var events: [LedgerEvent] = []
    let viewed = bytes.withUnsafeBytes { raw in
        Result { () throws(RecordDecodingError) -> RecordViewDecoder.Header in try decoder.decode(raw, sequence: 1, views: &views, events: &events) }
    }
    let names = decoder.takeNewProductNames()
    switch (Result { () throws(RecordDecodingError) -> Record in try RecordCodec.decode(bytes, sequence: 1) }, viewed) {
    case (.failure(let a), .failure(let b)):
        expect(a == b && views.isEmpty && events.isEmpty, "the view decoder fails otherwise")
    case (.success(let record), .success(let header)):
        expect(header.recordedAt == record.recordedAt && header.command == record.command, "the view decoder's header differs")
        let expected = record.events.map { EventView($0, product: { name in names.firstIndex(of: name).map(UInt32.init) ?? .max }) }
        if expected.contains(where: { $0 == nil }) {
            expect(views.isEmpty && events == record.events, "a record without views decoded otherwise")
        } else {
            expect(events.isEmpty && views == expected.compactMap { $0 }, "the views differ from the events")
        }
    default:
        expect(false, "the view decoder and the full decoder disagree on whether the bytes decode")
    }
    if let old = try? FormatOne.decode(bytes, sequence: 1) {
        _ = FormatOne.batches([old])
    }
    return 0
}
