// libFuzzer harness for legacy `verifyReceipt` responses: parsed, then converted into transactions. Never a trap.
import AppleSignedData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLegacyReceipt(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    guard let response = try? LegacyReceiptResponse(jsonData: bytes) else { return 0 }
    FuzzVerifiers.check(FuzzVerifiers.sandbox.verifyLegacyReceipt(response), "legacy receipt")
    return 0
}
