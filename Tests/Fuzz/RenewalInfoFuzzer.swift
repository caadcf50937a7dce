// libFuzzer harness for the decoded JWSRenewalInfo payload: any bytes decode or give a VerificationError,
// never a trap.
import AppleSignedData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRenewalInfo(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    FuzzVerifiers.check(Result { () throws(VerificationError) in try RenewalInfoPayload(jsonData: bytes) }, "renewal info")
    return 0
}
