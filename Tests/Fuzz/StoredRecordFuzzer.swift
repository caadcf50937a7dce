// libFuzzer harness for the stored form of records (the LMDB engine's record dictionary): stored bytes
// and dictionary entries read back from `data.mdb` must expand or be refused as damaged, never trap;
// any canonical bytes stored with any dictionary expand to exactly those bytes, with the fixed header
// (recordedAt, command key) in place. Built and run by `make fuzz` (Tests/Fuzz/fuzz.sh).
import LedgerCore

@testable import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzStoredRecord(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    // Dictionary entries (separated by 0xFD) before the first 0xFE, then the bytes to expand and store.
    let (entryBytes, payload) = splitOnce(fuzzInput(start, count), separator: 0xFE)
    let entries = entryBytes.split(separator: 0xFD, omittingEmptySubsequences: false).map(Array.init)
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
    var learning = dictionary
    _ = learning.learn(from: canonical)
    return 0
}
