// libFuzzer harness for the strict JSON reader and writer (`ledger submit` lines and the payloads of
// Apple's signed data are read by it): any bytes must read or throw, never trap. A value that reads
// renders to JSON that reads back, and renders again to the same bytes.
import StrictJSON

let reader = JSONReader(maximumDepth: 32, maximumBytes: 1 << 20)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSONReader(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    guard let value = try? reader.value(fuzzInput(start, count)) else { return 0 }
    let rendered = JSONWriter.render(value)
    guard let again = try? reader.value(rendered) else {
        expect(false, "rendered JSON does not read back: \(String(decoding: rendered, as: UTF8.self))")
        return 0
    }
    expect(JSONWriter.render(again) == rendered, "rendering is not stable")
    if case .object(let members) = value { _ = try? reader.object(JSONWriter.render(.object(members))) }
    return 0
}
