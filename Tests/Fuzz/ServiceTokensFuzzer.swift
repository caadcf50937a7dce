// libFuzzer harness for `--service-token-file` and the bearer tokens checked against it: any file
// parses or is refused, never traps; every token it holds is accepted and nothing else of the input is.
import LedgerService

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzServiceTokens(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    guard let tokens = try? ServiceTokens(parsing: bytes) else { return 0 }
    for line in bytes.split(separator: 0x0A) {
        let token = String(decoding: line, as: UTF8.self).trimmingCharacters(in: [" ", "\t", "\r"])
        if token.utf8.count >= ServiceTokens.minimumLength { expect((try? tokens.accepts(token)) == true, "a token of the file is refused") }
    }
    expect((try? tokens.accepts("")) == false, "the empty token is accepted")
    return 0
}
