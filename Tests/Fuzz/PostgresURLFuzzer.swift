// libFuzzer harness for PostgreSQL connection URLs (`--store postgres://…`, LEDGER_STORE): any string
// must parse or be refused with a message, never trap; a parsed URL's description never contains its
// password (read back, it holds none but ***), and describing the description again changes nothing. Built and run by `make fuzz`.
@testable import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPostgresURL(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let text = String(decoding: fuzzInput(start, count), as: UTF8.self)
    for candidate in [text, "postgres://" + text, "postgresql://user:" + text + "@host/db"] {
        guard let url = try? PostgresURL(candidate) else { continue }
        if let again = try? PostgresURL(url.description) {
            expect(again.password == nil || again.password == "***", "the description shows the password")
            expect(again.description == url.description, "the description of a description differs")
        }
        _ = try? StoreLocation.resolve(store: candidate, keys: "/keys", readStore: candidate, environment: [:])
    }
    return 0
}
