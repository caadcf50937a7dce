// libFuzzer harness for the record decoders: any byte string must decode or throw, never trap.
// Format 2 (the log's records, and those dispute bundles carry) is canonical: a record that decodes
// re-encodes to exactly the bytes it came from. Format 1 (old dispute bundles, upgrades) must decode
// or throw too. Built and run by `make fuzz` (Tests/Fuzz/fuzz.sh).
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
    if let old = try? FormatOne.decode(bytes, sequence: 1) {
        _ = FormatOne.batches([old])
    }
    return 0
}
