// libFuzzer harness for the record and event decoders: any byte string must decode or throw,
// never trap. Built and run by `make fuzz` (Tests/Fuzz/fuzz.sh).
import LedgerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRecordDecoder(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = [UInt8](UnsafeRawBufferPointer(start: start, count: count))
    if let record = try? RecordCodec.decode(bytes, sequence: 1) {
        // A record that decodes re-encodes to the same event bytes.
        let reencoded = EventCodec.encode(record.event)
        if (try? EventCodec.decode(reencoded)) != record.event { fatalError("event did not round-trip") }
    }
    _ = try? EventCodec.decode(bytes)
    return 0
}
