// libFuzzer harness for `LEDGER_MAP_SIZE` (the size of the map a store starts with, read from the
// environment by every command): any text is a size or nil, never a trap. A size is whole 4 KiB pages
// from 1 MiB to 1 TiB, and its decimal spelling parses back to itself. Built and run by `make fuzz`
// (Tests/Fuzz/fuzz.sh).
import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMapSize(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let text = String(decoding: fuzzInput(start, count), as: UTF8.self)
    guard let bytes = MapSize.parse(text) else { return 0 }
    expect(bytes % 4_096 == 0, "\(text): \(bytes) is not whole pages")
    expect(bytes >= MapSize.minimum && bytes <= MapSize.maximum, "\(text): \(bytes) is out of range")
    expect(MapSize.parse(String(bytes)) == bytes, "\(text): \(bytes) does not parse back to itself")
    return 0
}
