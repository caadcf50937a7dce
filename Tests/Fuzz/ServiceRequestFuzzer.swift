// libFuzzer harness for what `ledger serve` reads of a request before the submit protocol: the
// Authorization header, Apple's notification body and NDJSON batches. Any bytes are read or refused,
// never trap; what is read keeps its shape.
import LedgerService
import OwnershipLedger
import StrictJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzServiceRequest(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    if let token = RequestBodies.bearerToken(String(decoding: bytes, as: UTF8.self)) {
        expect(!token.isEmpty && !token.contains(" "), "a bearer token with a space or none")
    }
    if let line = try? RequestBodies.notificationLine(bytes) {
        let object = try? JSONReader().object(line)
        expect(object?["type"] == "notification" && object?["signedPayload"]?.string != nil && object?.count == 2, "a bad notification line")
    }
    if let lines = try? RequestBodies.ndjsonLines(bytes) {
        expect(lines.count <= RequestBodies.maximumBatchLines, "too many lines")
        for case .bytes(let line) in lines {
            expect(!line.contains(0x0A) && !SubmitProtocol.isBlank(line), "a line with a newline, or a blank one")
        }
    }
    return 0
}
