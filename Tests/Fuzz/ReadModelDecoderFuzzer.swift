// libFuzzer harness for the read-model codec: a persisted read-model entry (key and value, split at the
// first 0xFF byte) must load or throw, never trap; an entry that loads re-encodes to an entry that loads
// to the same state.
import LedgerCore
import Projections

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReadModelDecoder(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let (key, value) = splitOnce(fuzzInput(start, count), separator: 0xFF)
    var state = LedgerState()
    guard (try? ReadModel.load([(key, value)], into: &state)) != nil else { return 0 }
    var again = LedgerState()
    expect((try? ReadModel.load(ReadModel.entries(of: state).map { ($0.key, $0.value) }, into: &again)) != nil, "re-encoded entries do not load")
    expect(again == state, "read model did not round-trip")
    return 0
}
