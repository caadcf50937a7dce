// libFuzzer harness for the strict JSON reader and writer (`ledger submit` lines and the payloads of
// Apple's signed data are read by it): any bytes must read or throw, never trap. A value that reads
// renders to JSON that reads back, and renders again to the same bytes; read in place (``JSONView``),
// every member lookup, element and scalar agrees with the tree.
import StrictJSON

let reader = JSONReader(maximumDepth: 32, maximumBytes: 1 << 20)

/// Checks `view` against `value` (its tree), members and elements included.
func agree(_ view: JSONView, _ value: JSONValue) {
    expect(view.kind == value.kind && view.string == value.string && view.isNull == (value == .null), "scalar view differs")
    if case .integer(let integer) = value { expect(view.integer == integer, "integer view differs") }
    if case .number(let number) = value { expect(view.number == number, "number view differs") }
    if case .bool(let flag) = value { expect(view.bool == flag, "boolean view differs") }
    if let elements = value.elements {
        expect(view.elements.count == elements.count, "element count differs")
        for (element, expected) in zip(view.elements, elements) { agree(element, expected) }
    }
    if let members = value.members {
        expect(view.members.map(\.key) == members.keys, "member order differs")
        for pair in members.pairs {
            guard let found = view[pair.key] else { return expect(false, "member \(pair.key) not found in place") }
            agree(found, pair.value)
        }
        expect(view["\u{0}absent"] == nil || members["\u{0}absent"] != nil, "an absent key was found")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSONReader(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    guard let document = try? reader.document(fuzzInput(start, count)) else { return 0 }
    let value = document.root.value
    agree(document.root, value)
    let rendered = JSONWriter.render(value)
    guard let again = try? reader.value(rendered) else {
        expect(false, "rendered JSON does not read back: \(String(decoding: rendered, as: UTF8.self))")
        return 0
    }
    expect(JSONWriter.render(again) == rendered, "rendering is not stable")
    if case .object(let members) = value { _ = try? reader.object(JSONWriter.render(.object(members))) }
    return 0
}
