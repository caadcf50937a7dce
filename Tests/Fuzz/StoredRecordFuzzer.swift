// libFuzzer harness for the stored form of records (the LMDB engine's record dictionary): stored bytes
// and dictionary entries read back from `data.mdb` must expand or be refused as damaged, never trap;
// any canonical bytes stored with any dictionary expand to exactly those bytes, with the fixed header
// (recordedAt, command key) in place; log entries (one record or a block of them) are read or refused,
// and blocks give back the records they were made of; the same for lineage read models (a one-byte header). Built and run by `make fuzz` (Tests/Fuzz/fuzz.sh).
import LedgerCore

@testable import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzStoredRecord(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    // Dictionary entries (separated by 0xFD) before the first 0xFE, then the bytes to expand and store.
    let (entryBytes, payload) = splitOnce(fuzzInput(start, count), separator: 0xFE)
    // At most one entry past a full dictionary (254): `meta` keys number entries with one byte.
    let entries = entryBytes.split(separator: 0xFD, omittingEmptySubsequences: false).prefix(255).map(Array.init)
    let stored = entries.enumerated().map { (key: StoredRecordDictionary.metaKey($0.offset + 1), value: $0.element) }
    guard let dictionary = try? StoredRecordDictionary.load(stored) else { return 0 }
    var out: [UInt8] = []
    // Damaged or foreign stored bytes: expanded or refused.
    for bytes in [payload, [StoredRecordDictionary.marker] + payload] {
        _ = try? bytes.withUnsafeBytes { try dictionary.expand($0, into: &out) }
    }
    // Any canonical bytes: the stored form expands back to them.
    let canonical = [RecordCodec.formatVersion] + payload
    if let form = dictionary.storedForm(of: canonical) {
        expect(form[0] == StoredRecordDictionary.marker, "a stored form without its marker")
        expect(form.prefix(23).dropFirst() == canonical.prefix(23).dropFirst(), "the fixed header moved")
        do {
            try form.withUnsafeBytes { try dictionary.expand($0, into: &out) }
            expect(out == canonical, "the stored form does not expand to the canonical bytes")
        } catch {
            expect(false, "a stored form the encoder wrote is refused: \(error)")
        }
    }
    // Lineage read models (header: the flags byte alone): any stored bytes expand or are refused; any
    // value whose flags byte is under 0x80 is stored and expands back.
    _ = try? payload.withUnsafeBytes { try dictionary.expand($0, header: 1, into: &out) }
    let model = [(payload.first ?? 0) & 0x7F] + payload.dropFirst()
    if let form = dictionary.storedForm(of: model, header: 1) {
        expect(form[0] == model[0] | 0x80, "a stored read model without its flag")
        do {
            try form.withUnsafeBytes { try dictionary.expand($0, header: 1, into: &out) }
            expect(out == model, "a stored read model does not expand to its bytes")
        } catch {
            expect(false, "a stored read model the encoder wrote is refused: \(error)")
        }
    }
    var learning = dictionary
    _ = learning.learn(from: canonical)
    // Log entries: any bytes are one record, a block of them, or refused; the blocks the writer makes of
    // any records give them back in order.
    _ = try? payload.withUnsafeBytes { raw in try LogBlock.forEach(last: UInt64(payload.count), raw) { _, _ in true } }
    let records = payload.split(separator: 0xFC).map(Array.init).filter { $0.first != LogBlock.marker }
    var back: [[UInt8]] = []
    for (last, value) in LogBlock.entries(records.enumerated().map { (UInt64($0.offset + 1), $0.element) }) {
        do {
            try value.withUnsafeBytes { raw in
                try LogBlock.forEach(last: last, raw) { sequence, bytes in
                    expect(sequence == UInt64(back.count + 1), "record \(sequence) of a block read as \(back.count + 1)")
                    back.append(Array(bytes))
                    return true
                }
            }
        } catch {
            expect(false, "a block the writer made is refused: \(error)")
        }
    }
    expect(back == records, "the blocks do not give the records back")
    return 0
}
